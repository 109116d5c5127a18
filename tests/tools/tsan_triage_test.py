#!/usr/bin/env python3
"""tools/tsan_triage.py on reports in TSan's format (trimmed from real ones of scripts/sanitize.sh and of a
small racy program): a race between two accesses inside libcpp-httplib is the library's, a race or a bad
unlock reached from our sources is ours, however many system-header frames lie on top."""
import os
import subprocess
import sys
import tempfile

TOOL = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "tsan_triage.py")

LIBRARY_RACE = """==================
WARNING: ThreadSanitizer: data race (pid=841)
  Read of size 1 at 0x7b10000860b1 by thread T107:
    #0 memcmp ../../../../src/libsanitizer/sanitizer_common/sanitizer_common_interceptors.inc:891 (libtsan.so.2+0x63d04)
    #2 <null> <null> (libcpp-httplib.so.0.11+0x6ead2)
    #3 void std::__invoke_impl<void, httplib::ThreadPool::worker>(std::__invoke_other, httplib::ThreadPool::worker&&) /usr/include/c++/12/bits/invoke.h:61 (test_server+0x194d76)

  Previous write of size 1 at 0x7b10000860b1 by thread T106:
    #0 memcpy ../../../../src/libsanitizer/sanitizer_common/sanitizer_common_interceptors.inc:827 (libtsan.so.2+0x5dda6)
    #2 <null> <null> (libcpp-httplib.so.0.11+0x6e4a3)

  Location is heap block of size 65 at 0x7b10000860a0 allocated by thread T106:
    #0 operator new(unsigned long) ../../../../src/libsanitizer/tsan/tsan_new_delete.cpp:64 (libtsan.so.2+0x87323)
    #3 moeserve::testing::LocalServer::LocalServer() /SRC/tests/server/server_fixture.h:44 (test_server+0x9991c)

SUMMARY: ThreadSanitizer: data race (/lib/x86_64-linux-gnu/libcpp-httplib.so.0.11+0x6ead2)
==================
"""

OUR_RACE = """==================
WARNING: ThreadSanitizer: data race (pid=4483)
  Write of size 8 at 0x7b0c00000010 by thread T4:
    #0 std::vector<int>::push_back(int&&) /usr/include/c++/12/bits/stl_vector.h:1294 (racy+0x2b81)
    #1 operator() /SRC/src/engine/scheduler.cpp:11 (racy+0x2b81)

  Previous write of size 8 at 0x7b0c00000010 by thread T3:
    #0 operator new(unsigned long) ../../../../src/libsanitizer/tsan/tsan_new_delete.cpp:64 (libtsan.so.2+0x87323)
    #1 <null> <null> (libcpp-httplib.so.0.11+0x65b8a)

SUMMARY: ThreadSanitizer: data race /usr/include/c++/12/bits/stl_vector.h:1294 in std::vector<int>::push_back(int&&)
==================
WARNING: ThreadSanitizer: unlock of an unlocked mutex (or by a wrong thread) (pid=28569)
    #0 pthread_mutex_unlock ../../../../src/libsanitizer/sanitizer_common/sanitizer_common_interceptors.inc:4338 (libtsan.so.2+0x439f1)
    #1 moeserve::bench::CancelSource::cancel() /SRC/src/bench/request_client.cpp:41 (moeserve+0x287c71)

  Mutex M201 (0x7b6000010060) created at:
    #0 pthread_mutex_unlock ../../../../src/libsanitizer/sanitizer_common/sanitizer_common_interceptors.inc:4338 (libtsan.so.2+0x439f1)

SUMMARY: ThreadSanitizer: unlock of an unlocked mutex (or by a wrong thread) /SRC/src/bench/request_client.cpp:41
==================
"""


def triage(text):
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
        f.write(text)
    try:
        return subprocess.run([sys.executable, TOOL, "--ours", "/SRC/", f.name], capture_output=True, text=True)
    finally:
        os.unlink(f.name)


def main():
    library = triage(LIBRARY_RACE)
    assert library.returncode == 0, library.stdout + library.stderr
    assert "1 x data race in libcpp-httplib.so.0.11" in library.stdout, library.stdout
    assert "0 report(s) in our code" in library.stdout, library.stdout
    ours = triage(LIBRARY_RACE + OUR_RACE)
    assert ours.returncode == 1, ours.stdout + ours.stderr
    assert "2 report(s) in our code" in ours.stdout, ours.stdout
    assert ": data race (ours)" in ours.stdout and "unlock of an unlocked mutex" in ours.stdout, ours.stdout
    assert "1 x data race in libcpp-httplib" in ours.stdout, ours.stdout
    print("tsan_triage: library and our reports told apart")


if __name__ == "__main__":
    main()
