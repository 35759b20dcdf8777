#!/usr/bin/env python3
"""bench/attention_switch_summary.py: rounds of bench_attention and bench_cuda_decode JSON, as
bench/attention_switch_ab.sh names them, fold into off/on lists a row; a folder with none of them
is an error, not an empty result."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.realpath(__file__))
SCRIPT = os.path.normpath(os.path.join(HERE, "..", "..", "bench", "attention_switch_summary.py"))


def attention_run(ms, batched, taken):
    return {"device": {"name": "test gpu"}, "host": {}, "copy_bandwidth_GBps": 3000.0, "command": "bench_attention x",
            "rows": [{"kernel": "dense", "context": 65536, "nodes": 64, "ms": ms, "ms_batched": batched,
                      "ws_pingpong": taken}]}


def verify_run(dense, sparse):
    return {"command": "bench_cuda_decode y", "results": {"long_verify": {"verifies": [
        {"verify": "dense", "ms_last_logits": dense, "byte_floor_ms": 7.8},
        {"verify": "sparse first", "ms_last_logits": sparse, "byte_floor_ms": 5.5}]}}}


class SummaryTest(unittest.TestCase):
    def run_script(self, folder, out):
        return subprocess.run([sys.executable, SCRIPT, folder, "ws-pingpong", "abc1234", out, "--note", "n"],
                              capture_output=True, text=True)

    def test_rounds_fold_into_off_and_on_lists(self):
        with tempfile.TemporaryDirectory() as tmp:
            runs = {"attention_off.1.json": attention_run(0.14, 0.135, False),
                    "attention_on.1.json": attention_run(0.13, 0.125, True),
                    "attention_off.2.json": attention_run(0.141, 0.136, False),
                    "attention_on.2.json": attention_run(0.131, 0.126, True),
                    "verify8b_false.1.json": verify_run(11.5, 9.5),
                    "verify8b_true.1.json": verify_run(11.2, 9.4)}
            for name, data in runs.items():
                with open(os.path.join(tmp, name), "w") as f:
                    json.dump(data, f)
            with open(os.path.join(tmp, "summary.txt"), "w") as f:
                f.write("attention test rc=0\n\nracecheck rc=0\n")
            out = os.path.join(tmp, "result.json")
            proc = self.run_script(tmp, out)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            with open(out) as f:
                r = json.load(f)
            self.assertEqual(r["commit"], "abc1234")
            self.assertEqual(r["checks"], ["attention test rc=0", "racecheck rc=0"])
            row = r["attention_runs"]["dense ctx=65536 nodes=64"]
            self.assertEqual(row["off_ms"], [0.14, 0.141])
            self.assertEqual(row["on_ms_batched"], [0.125, 0.126])
            self.assertTrue(row["ws_pingpong_taken"])
            self.assertEqual(r["device"], {"name": "test gpu"})
            self.assertEqual(r["verify_8b_64k"]["dense"]["true_ms_last_logits"], [11.2])
            self.assertEqual(r["verify_8b_64k"]["sparse first"]["false_ms_last_logits"], [9.5])
            self.assertEqual(r["verify_8b_64k"]["byte_floor_ms_dense"], 7.8)

    def test_an_empty_folder_is_an_error(self):
        with tempfile.TemporaryDirectory() as tmp:
            proc = self.run_script(tmp, os.path.join(tmp, "result.json"))
            self.assertNotEqual(proc.returncode, 0)
            self.assertIn("nothing from attention_switch_ab.sh", proc.stderr)
            self.assertFalse(os.path.exists(os.path.join(tmp, "result.json")))


if __name__ == "__main__":
    unittest.main()
