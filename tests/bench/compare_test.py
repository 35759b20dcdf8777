#!/usr/bin/env python3
"""bench/compare run as a user runs it, on the small results files in tests/data/bench_compare/.

old.json -> new.json holds, by design (values chosen so the percentages are exact):
  results rows reordered; rows=1 skinny_us 4 -> 3 (-25%, better), cublas_bf16_us 10 -> 10.5
  (+5%, worse), skinny_GBps 300 -> 400 (+33.3%, better); rows=4 skinny_us 5 -> 5.05 (+1%, worse);
  projection=o only in old, projection=down only in new; decode_tokens_per_s_runs medians
  100 -> 125 (+25%, better); timings.weight_count 200 -> 220 (+10%, no direction);
  timings.prefill_seconds unchanged; only_in_old / only_in_new / extra_GBps one-sided;
  first_tokens (token ids) differ but are no metric.
"""
import importlib.machinery
import importlib.util
import json
import os
import re
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.realpath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
SCRIPT = os.path.join(ROOT, "bench", "compare")
DATA = os.path.join(ROOT, "tests", "data", "bench_compare")
OLD = os.path.join(DATA, "old.json")
NEW = os.path.join(DATA, "new.json")

# A record's label lists its identity fields in the file's order.
ROW1 = "results[model=M,projection=qkv,N=960,K=576,rows=1]"
ROW4 = ROW1.replace("rows=1", "rows=4")
ROW_O = "results[model=M,projection=o,N=576,K=576,rows=1]"
ROW_DOWN = "results[model=M,projection=down,N=576,K=1536,rows=1]"


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          timeout=60)


def load_module():
    loader = importlib.machinery.SourceFileLoader("bench_compare", SCRIPT)
    spec = importlib.util.spec_from_loader("bench_compare", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


class JsonComparison(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        r = run("--json", OLD, NEW)
        assert r.returncode == 0, r.stderr
        cls.result = json.loads(r.stdout)
        cls.metrics = {(m["record"], m["metric"]): m for m in cls.result["metrics"]}

    def metric(self, record, name):
        self.assertIn((record, name), self.metrics, sorted(self.metrics))
        return self.metrics[(record, name)]

    def test_header_names_both_files(self):
        self.assertEqual(self.result["bench"], "skinny_gemm")
        self.assertEqual(self.result["old"]["commit"], "aaaa111")
        self.assertEqual(self.result["new"]["commit"], "bbbb222")
        self.assertEqual(self.result["new"]["device"], "NVIDIA H100 80GB HBM3")
        self.assertEqual(self.result["new"]["driver"], "580.159.04")
        self.assertEqual(self.result["warnings"], [])

    def test_array_records_match_by_identity_not_position(self):
        # rows=1 is first in old.json and last in new.json.
        m = self.metric(ROW1, "skinny_us")
        self.assertEqual((m["old"], m["new"]), (4.0, 3.0))
        self.assertAlmostEqual(m["change_pct"], -25.0)
        m = self.metric(ROW4, "skinny_us")
        self.assertEqual((m["old"], m["new"]), (5.0, 5.05))
        self.assertAlmostEqual(m["change_pct"], 1.0)

    def test_identity_fields_are_not_metrics(self):
        names = {name for _, name in self.metrics}
        for field in ("N", "K", "rows"):
            self.assertNotIn(field, names)

    def test_direction_marks(self):
        self.assertEqual(self.metric(ROW1, "skinny_us")["verdict"], "better")       # lower, fell
        self.assertEqual(self.metric(ROW1, "cublas_bf16_us")["verdict"], "worse")   # lower, rose
        self.assertAlmostEqual(self.metric(ROW1, "cublas_bf16_us")["change_pct"], 5.0)
        self.assertEqual(self.metric(ROW1, "skinny_GBps")["verdict"], "better")     # higher, rose
        self.assertAlmostEqual(self.metric(ROW1, "skinny_GBps")["change_pct"], 100.0 / 3.0)
        self.assertEqual(self.metric(ROW4, "skinny_us")["verdict"], "worse")
        weights = self.metric("timings", "weight_count")
        self.assertAlmostEqual(weights["change_pct"], 10.0)
        self.assertIsNone(weights["direction"])
        self.assertIsNone(weights["verdict"])
        same = self.metric("timings", "prefill_seconds")
        self.assertEqual((same["change_pct"], same["verdict"]), (0.0, "same"))

    def test_list_of_numbers_is_its_median(self):
        m = self.metric("(top level)", "decode_tokens_per_s_runs")
        self.assertEqual((m["old"], m["new"]), (100.0, 125.0))
        self.assertAlmostEqual(m["change_pct"], 25.0)
        self.assertEqual(m["verdict"], "better")
        self.assertEqual((m["summary"], m["old_runs"], m["new_runs"]), ("median", 3, 3))

    def test_token_id_lists_are_not_metrics(self):
        names = {name for _, name in self.metrics}
        self.assertNotIn("first_tokens", names)  # differ between the files, but ids have no median
        module = load_module()
        for name in ("first_tokens", "prompt_ids", "tokens", "ids"):
            self.assertTrue(module.is_id_list(name), name)
        for name in ("decode_tokens_per_s_runs", "steps_per_s_with", "prefill_ms_runs"):
            self.assertFalse(module.is_id_list(name), name)

    def test_device_and_host_are_not_metrics(self):
        names = {name for _, name in self.metrics}
        self.assertNotIn("multiprocessors", names)
        self.assertNotIn("hardware_threads", names)

    def test_added_and_removed(self):
        self.assertEqual(self.result["added_records"], [ROW_DOWN])
        self.assertEqual(self.result["removed_records"], [ROW_O])
        self.assertIn({"record": "(top level)", "metric": "only_in_new"},
                      self.result["added_metrics"])
        self.assertIn({"record": ROW1, "metric": "extra_GBps"}, self.result["added_metrics"])
        self.assertEqual(self.result["removed_metrics"],
                         [{"record": "(top level)", "metric": "only_in_old"}])

    def test_sorted_by_record(self):
        records = [m["record"] for m in self.result["metrics"]]
        self.assertEqual(records, sorted(records, key=load_module().natural_key))
        self.assertLess(records.index(ROW1), records.index(ROW4))


class ProvenanceIsNoIdentity(unittest.TestCase):
    def test_steps_of_two_runs_pair_despite_other_commands_and_commits(self):
        # Two bench/cuda_e2e.py-like files: the same step, run from other paths at other commits.
        def doc(path, commit, tps, code):
            return {"bench": "cuda_e2e", "commit": commit, "steps": [
                {"step": "decode_short_prompt", "command": f"{path}/bench_cuda_decode --commit {commit}",
                 "exit_code": code, "seconds": 1.5, "result": {"tokens_per_s": tps}}]}
        module = load_module()
        result = module.compare(doc("/tmp/a", "aaaa111", 100.0, 0), doc("/tmp/b", "bbbb222", 120.0, 1),
                                "old.json", "new.json")
        metrics = {(m["record"], m["metric"]): m for m in result["metrics"]}
        m = metrics[("steps[step=decode_short_prompt].result", "tokens_per_s")]
        self.assertAlmostEqual(m["change_pct"], 20.0)
        m = metrics[("steps[step=decode_short_prompt]", "exit_code")]
        self.assertEqual((m["old"], m["new"]), (0, 1))
        for side in ("added_records", "added_metrics", "removed_records", "removed_metrics"):
            self.assertEqual(result[side], [], side)


class TextOutput(unittest.TestCase):
    def test_lines_show_old_new_change_and_mark(self):
        r = run(OLD, NEW)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout
        self.assertIn("bench: skinny_gemm", out)
        self.assertRegex(out, r"old: .*old\.json\s+commit aaaa111\s+date 2026-11-20T10:00:00Z\s+"
                              r"NVIDIA H100 80GB HBM3, driver 580\.159\.04")
        self.assertRegex(out, r"(?m)^  skinny_us\s+4 -> 3\s+-25\.0%\s+better$")
        self.assertRegex(out, r"(?m)^  cublas_bf16_us\s+10 -> 10\.5\s+\+5\.0%\s+worse$")
        self.assertRegex(out, r"(?m)^  weight_count\s+200 -> 220\s+\+10\.0%$")
        self.assertRegex(out, r"(?m)^  decode_tokens_per_s_runs \(median\)\s+100 -> 125\s+\+25\.0%\s+better$")
        self.assertRegex(out, r"(?m)^added \(only in NEW\):\n  record " + re.escape(ROW_DOWN) + "$")
        self.assertRegex(out, r"(?m)^removed \(only in OLD\):\n  record " + re.escape(ROW_O) + "$")
        self.assertNotIn("warning", out)

    def test_threshold_keeps_only_large_changes(self):
        r = run("--threshold", "10", OLD, NEW)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("showing changes of at least 10%", r.stdout)
        self.assertRegex(r.stdout, r"(?m)^  skinny_us\s+4 -> 3\s+-25\.0%")
        self.assertRegex(r.stdout, r"(?m)^  weight_count\s+200 -> 220")   # exactly 10%: kept
        self.assertNotIn("cublas_bf16_us", r.stdout)                       # 5%
        self.assertNotIn("prefill_seconds", r.stdout)                      # 0%
        self.assertNotIn(ROW4, r.stdout)                                   # its only change is 1%
        self.assertIn("record " + ROW_DOWN, r.stdout)                      # added: always listed

        data = json.loads(run("--json", "--threshold", "10", OLD, NEW).stdout)
        shown = {(m["record"], m["metric"]) for m in data["metrics"]}
        self.assertEqual(shown, {(ROW1, "skinny_us"), (ROW1, "skinny_GBps"),
                                 ("(top level)", "decode_tokens_per_s_runs"),
                                 ("timings", "weight_count")})

    def test_devices_differ_warns_on_one_line(self):
        r = run(OLD, os.path.join(DATA, "other_device.json"))
        self.assertEqual(r.returncode, 0, r.stderr)
        warnings = [l for l in r.stdout.splitlines() if l.startswith("warning:")]
        self.assertEqual(len(warnings), 1, r.stdout)
        self.assertIn("NVIDIA H100 80GB HBM3 vs NVIDIA H200", warnings[0])
        self.assertIn("meaningless", warnings[0])
        self.assertRegex(r.stdout, r"copy_bandwidth_GBps\s+3000 -> 4300\s+\+43\.3%\s+better")

    def test_help_describes_the_options(self):
        r = run("--help")
        self.assertEqual(r.returncode, 0)
        for word in ("--threshold", "--json", "--key", "median", "lower is better",
                     "higher is better", "Exit status"):
            self.assertIn(word, r.stdout)


class Errors(unittest.TestCase):
    def assert_refused(self, r, *fragments):
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertEqual(r.stdout, "")
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        for fragment in fragments:
            self.assertIn(fragment, lines[0])

    def test_missing_file(self):
        missing = os.path.join(DATA, "no_such_file.json")
        self.assert_refused(run(OLD, missing), "cannot read", missing)

    def test_unreadable_file(self):
        self.assert_refused(run(DATA, NEW), "cannot read", DATA)  # a directory

    def test_not_json(self):
        bad = os.path.join(DATA, "truncated.json")
        self.assert_refused(run(bad, NEW), bad, "is not JSON", "line")

    def test_different_benchmarks(self):
        self.assert_refused(run(OLD, os.path.join(DATA, "other_bench.json")),
                            "'skinny_gemm'", "'gpu_copy'", "same benchmark")

    def test_bad_threshold(self):
        r = run("--threshold", "-5", OLD, NEW)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--threshold", r.stderr)


class Direction(unittest.TestCase):
    def test_names(self):
        direction = load_module().direction
        lower = ["skinny_us", "decode_step_median_ms", "decode_seconds", "wall_s", "time",
                 "latency_p50", "cuda_events_median_ns", "overhead", "host_argmax_us_per_step_median",
                 "ms_per_step"]
        higher = ["decode_tokens_per_s", "tokens_per_s", "steps_per_s_with", "copy_bandwidth_GBps",
                  "bandwidth", "GB/s", "speedup", "speedup_vs_flash_nomask",
                  "skinny_over_cublas_speed", "ours_fraction_of_copy", "acceptance_rate",
                  "mean_accepted_length", "decode_tokens_per_s_runs"]
        neither = ["weight_count", "items", "ratio", "rouge_l", "buffer_mib"]
        for name in lower:
            self.assertEqual(direction(name), "lower", name)
        for name in higher:
            self.assertEqual(direction(name), "higher", name)
        for name in neither:
            self.assertIsNone(direction(name), name)


if __name__ == "__main__":
    unittest.main()
