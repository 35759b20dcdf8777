#!/usr/bin/env python3
"""bench/gpu_checks.py's run(): a command past its timeout is killed with everything it started
(compute-sanitizer's target kept a GPU busy after the sanitizer alone was killed), and a command
that finishes gives its exit code and output."""
import importlib.util
import os
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.realpath(__file__))
SCRIPT = os.path.normpath(os.path.join(HERE, "..", "..", "bench", "gpu_checks.py"))
spec = importlib.util.spec_from_file_location("gpu_checks", SCRIPT)
gc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gc)


def alive(pid):
    """Whether pid runs (a zombie waiting for its reaper does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class RunTest(unittest.TestCase):
    def test_timeout_kills_the_commands_children(self):
        with tempfile.TemporaryDirectory() as tmp:
            pid_file = os.path.join(tmp, "child")
            # The shell starts a child that would outlive it, then waits past the timeout.
            rc, out, secs = gc.run(["bash", "-c", f"sleep 60 & echo $! > {pid_file}; echo started; wait"], 1)
            self.assertEqual(rc, 124)
            self.assertIn("started", out)
            self.assertIn("[timed out]", out)
            self.assertLess(secs, 30)
            with open(pid_file) as f:
                child = int(f.read())
            deadline = time.time() + 5
            while alive(child) and time.time() < deadline:
                time.sleep(0.05)
            self.assertFalse(alive(child), "the command's child outlived the timeout")

    def test_finished_command_gives_its_exit_code_and_both_streams(self):
        rc, out, _ = gc.run(["bash", "-c", "echo out; echo err >&2; exit 3"], 30)
        self.assertEqual(rc, 3)
        self.assertIn("out", out)
        self.assertIn("err", out)

    def test_missing_binary_is_127(self):
        rc, out, _ = gc.run(["/nonexistent/specula_binary"], 5)
        self.assertEqual(rc, 127)
        self.assertIn("not found", out)


if __name__ == "__main__":
    unittest.main()
