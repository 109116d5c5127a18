#!/usr/bin/env python3
"""scripts/pending/: every kept experiment still applies to the tree (a patch that no longer applies would fail only
in device-prepare.sh, before a device call), and the README's table names each one."""
import glob
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PENDING = os.path.join(ROOT, "scripts", "pending")


def main():
    patches = sorted(glob.glob(os.path.join(PENDING, "*.patch")))
    with open(os.path.join(PENDING, "README.md")) as f:
        readme = f.read()
    for p in patches:
        name = os.path.basename(p)
        assert "`%s`" % name in readme, "scripts/pending/README.md does not list %s" % name
    if subprocess.run(["git", "-C", ROOT, "rev-parse", "--git-dir"], capture_output=True).returncode != 0:
        print("not a git checkout: README checked, patches not applied")
        return 0
    failed = []
    for p in patches:
        r = subprocess.run(["git", "-C", ROOT, "apply", "--check", p], capture_output=True, text=True)
        if r.returncode != 0:
            failed.append("%s: %s" % (os.path.basename(p), r.stderr.strip()))
    assert not failed, "patches that no longer apply (rebase them on main):\n" + "\n".join(failed)
    print("%d patches apply" % len(patches))
    return 0


if __name__ == "__main__":
    sys.exit(main())
