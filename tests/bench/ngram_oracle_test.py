#!/usr/bin/env python3
"""bench/ngram_oracle.py's replay on one item worked out by hand (slope 0.5):

prompt 1 2 3 4 1 2, output 3 4 9 1 2 3.
round 1: no earlier 4 1 2; the last 1 2 occurred at 0, so the chain drafts 3 4 1 2 (depth 4);
         3 4 match, then 9: 3 tokens, rows 1 + 4, cost 1 + 0.5 * 4 = 3.
round 2: nothing ends in 9 earlier: 1 token (the target's 1), cost 1.
round 3: the last token 1 occurred at 4 (most recent) and 0: the chain drafts 2 3 4 9; 2 3 match and
         the output ends: 2 tokens, cost 3.   -> 6 tokens, 3 rounds, cost 7.
tree:2 adds in round 3 the continuation of the 1 at 0, 2 3 4 1: a trie of 5 nodes, cost 3.5.
"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.realpath(__file__))
SCRIPT = os.path.normpath(os.path.join(HERE, "..", "..", "bench", "ngram_oracle.py"))
spec = importlib.util.spec_from_file_location("ngram_oracle", SCRIPT)
no = importlib.util.module_from_spec(spec)
spec.loader.exec_module(no)

ITEMS = [{"category": "rag", "prompt": [1, 2, 3, 4, 1, 2], "output": [3, 4, 9, 1, 2, 3]}]


class NgramOracleTest(unittest.TestCase):
    def test_chain_replay_by_hand(self):
        r = no.replay(ITEMS, no.suffix_policy(3, 4, 1, True), 0.5)
        self.assertEqual(r["rag"]["tokens_per_round"], 2.0)
        self.assertAlmostEqual(r["rag"]["modeled_speedup"], round(6 / 7, 3))
        self.assertEqual(r["overall"], r["rag"])

    def test_tree_of_two_pays_for_its_extra_branch(self):
        r = no.replay(ITEMS, no.suffix_policy(3, 4, 2, True), 0.5)
        self.assertEqual(r["rag"]["tokens_per_round"], 2.0)
        self.assertAlmostEqual(r["rag"]["modeled_speedup"], round(6 / 7.5, 3))

    def test_occurrences_most_recent_first(self):
        self.assertEqual(no.occurrences([1, 2, 3, 4, 1, 2, 3, 4, 9, 1], 1), [5, 1])
        self.assertEqual(no.occurrences([1, 2, 1, 2], 2), [2])

    def test_bad_file_is_one_clear_error(self):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump({"runs": []}, f)
        p = subprocess.run([sys.executable, SCRIPT, "--outputs", f.name], capture_output=True, text=True)
        os.unlink(f.name)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("is no bench_draft_replay --save-outputs file", p.stderr)


if __name__ == "__main__":
    unittest.main()
