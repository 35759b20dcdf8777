#!/usr/bin/env python3
"""bench/attention_builds_ab.sh against an archive of stand-in binaries (shell scripts that write
their arguments and environment, then exit with a set code): each step's folder holds the files
bench/attention_switch_summary.py reads, each summary line carries that binary's own exit code,
a VAR=VALUE reaches only the run it names, and a bad step is refused before anything runs."""
import json
import os
import subprocess
import tarfile
import tempfile
import unittest

HERE = os.path.dirname(os.path.realpath(__file__))
SCRIPT = os.path.normpath(os.path.join(HERE, "..", "..", "bench", "attention_builds_ab.sh"))

# A stand-in bench_attention (and bench_cuda_decode): writes the --out JSON (its set's name and the
# env switch it saw), exits 0.
BENCH = """#!/bin/bash
out=
while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done
printf '{"commit": "%s", "tree_attn": "%s", "rows": []}' "$SET" "${SPECULA_TREE_ATTN:-}" > "$out"
"""
# A stand-in attention test: exits with the code its set names (3 or 0).
TEST = """#!/bin/bash
echo "[  PASSED  ] 1 test."
exit $RC
"""


class BuildsAbTest(unittest.TestCase):
    def make_archive(self, tmp):
        stage = os.path.join(tmp, "stage")
        for name, rc in (("old", 0), ("new", 3)):
            d = os.path.join(stage, name)
            os.makedirs(d)
            for binary, text in (("bench_attention", BENCH), ("bench_cuda_decode", BENCH),
                                 ("kernels_cuda_attention_test", TEST)):
                path = os.path.join(d, binary)
                with open(path, "w") as f:
                    f.write(text.replace("$SET", name).replace("$RC", str(rc)))
                os.chmod(path, 0o755)
        with open(os.path.join(stage, "builds.txt"), "w") as f:
            f.write("old aaa1111\nnew bbb2222\n")
        archive = os.path.join(tmp, "b.tar.xz")
        with tarfile.open(archive, "w:xz") as t:
            for name in ("builds.txt", "old", "new"):
                t.add(os.path.join(stage, name), arcname=name)
        return archive

    def run_script(self, tmp, *steps):
        out = os.path.join(tmp, "out")
        os.makedirs(out, exist_ok=True)
        env = dict(os.environ, OUT=out)
        env.pop("SPECULA_TREE_ATTN", None)
        r = subprocess.run(["bash", SCRIPT, self.make_archive(tmp), *steps], capture_output=True, text=True, env=env)
        # Everything comes back as one tar of the step folders (the device returns few loose files).
        packed = os.path.join(out, "attention_builds.tgz")
        if r.returncode == 0:
            self.assertEqual(os.listdir(out), ["attention_builds.tgz"])
            with tarfile.open(packed) as t:
                kw = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
                t.extractall(os.path.join(tmp, "unpacked"), **kw)
            return r, os.path.join(tmp, "unpacked")
        self.assertFalse(os.path.exists(packed))
        return r, out

    def test_steps_record_each_binarys_exit_code_and_env(self):
        with tempfile.TemporaryDirectory() as tmp:
            r, out = self.run_script(tmp, "test:new", "test:old", "env:old:SPECULA_TREE_ATTN=m1b4k2", "attn:old:new",
                                     "ab:old:new")
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(out, "test_new", "summary.txt")) as f:
                self.assertIn("attention test new bbb2222  rc=3", f.read())
            with open(os.path.join(out, "test_old", "summary.txt")) as f:
                self.assertIn("rc=0", f.read())
            env_dir = os.path.join(out, "env_old_SPECULA_TREE_ATTN_m1b4k2")
            for round_ in (1, 2):
                with open(os.path.join(env_dir, f"attention_off.{round_}.json")) as f:
                    self.assertEqual(json.load(f)["tree_attn"], "")
                with open(os.path.join(env_dir, f"attention_on.{round_}.json")) as f:
                    self.assertEqual(json.load(f)["tree_attn"], "m1b4k2")
            attn_dir = os.path.join(out, "attn_old_new")
            with open(os.path.join(attn_dir, "attention_off.1.json")) as f:
                self.assertEqual(json.load(f)["commit"], "old")
            with open(os.path.join(attn_dir, "attention_on.2.json")) as f:
                self.assertEqual(json.load(f)["commit"], "new")
            # attn runs attention_binary_ab.sh's attention half only; ab both halves.
            self.assertFalse([n for n in os.listdir(attn_dir) if n.startswith("verify8b_")])
            with open(os.path.join(out, "ab_old_new", "verify8b_true.2.json")) as f:
                self.assertEqual(json.load(f)["commit"], "new")
            with open(os.path.join(out, "ab_old_new", "verify8b_false.1.json")) as f:
                self.assertEqual(json.load(f)["commit"], "old")
            with open(os.path.join(out, "steps.txt")) as f:
                self.assertEqual(len(f.read().splitlines()), 5)

    def test_bad_steps_are_refused_before_any_runs(self):
        for step in ("test:missing", "env:old:lower=1", "ab:old", "bogus"):
            with tempfile.TemporaryDirectory() as tmp:
                r, out = self.run_script(tmp, "test:old", step)
                self.assertEqual(r.returncode, 2, step)
                self.assertIn("attention_builds_ab:", r.stderr)
                self.assertFalse(os.path.exists(os.path.join(out, "test_old")), step)


if __name__ == "__main__":
    unittest.main()
