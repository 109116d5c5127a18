#!/usr/bin/env python3
"""Sorts ThreadSanitizer reports into ours and a library's, for scripts/sanitize.sh.

Debian's libcpp-httplib is not built with TSan, so TSan cannot see the synchronization inside it (a
function-local static read after the guard's inline acquire load, say) and reports races between two of its
own accesses. Suppression files cannot tell those apart from races in our server handlers: a `race:` entry
matches any frame of either stack, and every handler runs under httplib's frames. So each access's stack is
read from the top: TSan's interceptors (memcpy, operator new, ...) and code inlined from system headers
(/usr/include) are passed over, and the first frame left decides whose access it is. A report is ours when
any of its stacks is, and then it fails the run.

Usage: tsan_triage.py --ours SOURCE_DIR LOG...   (the files TSan wrote with log_path=...)
Exit status: 0 when no report is ours, 1 otherwise.
"""
import argparse
import re
import sys

FRAME = re.compile(r"^\s*#\d+ (?P<function>.*?) (?P<file>\S+) \((?P<module>[^()]+?)\+0x[0-9a-f]+\)$")
STACK_HEAD = re.compile(r"^  (?:(?:Previous )?(?:[Aa]tomic )?(?:[Rr]ead|[Ww]rite)\b|Mutex \S+ acquired)")


def owner(frames, ours):
    """Whose code made an access: 'ours', a module name, or None when every frame was passed over."""
    for function, path, module in frames:
        if "libtsan" in module or path.startswith("/usr/include/") or path.startswith("../../../../src/libsanitizer"):
            continue
        return "ours" if path.startswith(ours) else module
    return None


def reports(text):
    """(title, [stack, ...], text) for each report; a stack is a list of (function, file, module)."""
    for block in text.split("==================\n"):
        lines = block.splitlines()
        head = next((l for l in lines if l.startswith("WARNING: ThreadSanitizer:")), None)
        if head is None:
            continue
        skip = []  # where the allocation and thread-creation stacks go: they say where, not who accessed
        stacks, current = [], None
        for line in lines[lines.index(head) + 1:]:
            if STACK_HEAD.match(line):
                current = []
                stacks.append(current)
            elif line.startswith(("  Location", "  Thread", "  Mutex")):
                current = skip
            elif m := FRAME.match(line):
                if current is None:  # a report whose first stack has no heading (a bad unlock, say)
                    current = []
                    stacks.append(current)
                current.append((m["function"], m["file"], m["module"]))
        title = re.sub(r" \(pid=\d+\)", "", head.split("ThreadSanitizer: ", 1)[1])
        yield title, [s for s in stacks if s], block


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ours", required=True, help="source tree prefix whose frames are ours")
    parser.add_argument("logs", nargs="*")
    args = parser.parse_args()
    ours_count, library = 0, {}
    for path in args.logs:
        with open(path, errors="replace") as f:
            for title, stacks, block in reports(f.read()):
                owners = [owner(s, args.ours) for s in stacks]
                if "ours" in owners or not stacks:
                    ours_count += 1
                    print(f"== {path}: {title} (ours)\n{block}")
                else:
                    key = f"{title} in {', '.join(sorted({o or '?' for o in owners}))}"
                    library[key] = library.get(key, 0) + 1
    for key, n in sorted(library.items()):
        print(f"tsan: {n} x {key}: inside a library TSan cannot see into, not counted")
    print(f"tsan: {ours_count} report(s) in our code")
    return 1 if ours_count else 0


if __name__ == "__main__":
    sys.exit(main())
