#!/usr/bin/env python3
"""bench/selection_overlap.py export on a small session database built here (the recorder's tables,
only the columns the exporter reads), against overlap figures worked out by hand:

one round, 2 layers, 1 KV head of 8 committed blocks, a tree of 3 nodes under the pending token:
rows 0..3, parents -1, 0, 0, 1 (BFS order 0, 1, 2, 3), groups of 2 in BFS order.
  layer 0: rows {0,3,6,7} {0,4,6,7} {0,3,6,7} {0,5,6,7}
     group (0,1): J = 3/5, union 5, sizes 8;  group (2,3): J = 3/5, union 5, sizes 8
  layer 1: every row {0,1,6,7}: J = 1, union 4, sizes 8 per group
Groups of 2: mean J = (0.6 + 0.6 + 1 + 1) / 4 = 0.8; loaded ratio = (5+5+4+4) / 32 = 0.5625;
mean union over mean size = (5/4 + 5/4 + 1 + 1) / 4 = 1.125.
Groups of 4: layer 0 pairs J: (0,1) .6 (0,2) 1 (0,3) .6 (1,2) .6 (1,3) .6 (2,3) .6 -> 4/6;
layer 1: 1. Mean (4/6 + 1) / 2 = 5/6; loaded (6 + 4) / 32.
"""
import importlib.util
import json
import os
import sqlite3
import struct
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.realpath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
spec = importlib.util.spec_from_file_location("selection_overlap", os.path.join(ROOT, "bench", "selection_overlap.py"))
so = importlib.util.module_from_spec(spec)
spec.loader.exec_module(so)

ROWS = {0: [[0, 3, 6, 7], [0, 4, 6, 7], [0, 3, 6, 7], [0, 5, 6, 7]], 1: [[0, 1, 6, 7]] * 4}


def bits(blocks, total=8):
    out = bytearray((total + 7) // 8)
    for b in blocks:
        out[b >> 3] |= 1 << (b & 7)
    return bytes(out)


def make_session(path, group_size=2, groups=None):
    db = sqlite3.connect(path)
    db.executescript("""
      CREATE TABLE SPECULA_SESSION (configJson TEXT);
      CREATE TABLE SPECULA_ROUNDS (round INTEGER, contextLen INTEGER);
      CREATE TABLE SPECULA_DRAFT_NODES (round INTEGER, node INTEGER, parent INTEGER);
      CREATE TABLE SPECULA_LAYER_SELECTIONS (round INTEGER, layer INTEGER, query INTEGER, queryGroup INTEGER,
        mode TEXT, totalBlocks INTEGER, blockBits BLOB);""")
    db.execute("INSERT INTO SPECULA_SESSION VALUES (?)",
               (json.dumps({"sparse": {"group_size": group_size}, "tree": "test"}),))
    db.execute("INSERT INTO SPECULA_ROUNDS VALUES (0, 120)")
    for node, parent in enumerate([-1, -1, 0]):  # node ids; rows are node + 1
        db.execute("INSERT INTO SPECULA_DRAFT_NODES VALUES (0, ?, ?)", (node, parent))
    groups = groups or [r // group_size for r in range(4)]
    for layer, rows in ROWS.items():
        db.execute("INSERT INTO SPECULA_LAYER_SELECTIONS VALUES (0, ?, -1, -1, 'refresh', 8, ?)",
                   (layer, bits(sorted(set().union(*map(set, rows))))))
        for r, blocks in enumerate(rows):
            db.execute("INSERT INTO SPECULA_LAYER_SELECTIONS VALUES (0, ?, ?, ?, 'refresh', 8, ?)",
                       (layer, r, groups[r], bits(blocks)))
    db.commit()
    db.close()


class ExportTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.db = os.path.join(self.dir.name, "s.sqlite")

    def tearDown(self):
        self.dir.cleanup()

    def test_overlap_figures(self):
        make_session(self.db)
        summary, cases = so.export([self.db], kv_heads=1, group_sizes=[2, 4], rounds_kept=1)
        g2 = summary["overall_by_group_size"]["2"]
        self.assertEqual(g2["groups"], 4)
        self.assertAlmostEqual(g2["mean_pairwise_jaccard"], 0.8)
        self.assertAlmostEqual(g2["loaded_ratio_union_over_per_query"], 18 / 32)
        self.assertAlmostEqual(g2["mean_union_over_mean_size"], 1.125)
        g4 = summary["overall_by_group_size"]["4"]
        self.assertAlmostEqual(g4["mean_pairwise_jaccard"], 5 / 6)
        self.assertAlmostEqual(g4["loaded_ratio_union_over_per_query"], 10 / 32)
        self.assertEqual(len(cases), 2)
        self.assertEqual(cases[0]["parents"], [-1, 0, 0, 1])
        self.assertEqual(cases[0]["order"], [0, 1, 2, 3])
        self.assertEqual(cases[0]["sets"][0][3], [0, 5, 6, 7])

    def test_binary_layout(self):
        make_session(self.db)
        _, cases = so.export([self.db], kv_heads=1, group_sizes=[2], rounds_kept=1)
        out = os.path.join(self.dir.name, "s.bin")
        with open(out, "wb") as f:
            so.write_cases(f, cases)
        data = open(out, "rb").read()
        self.assertEqual(data[:8], b"SPSEL001")
        self.assertEqual(struct.unpack_from("<i", data, 8)[0], 2)
        header = struct.unpack_from("<8i", data, 12)
        self.assertEqual(header, (0, 0, 0, 1, 4, 120, 8, 2))
        at = 12 + 32 + 4 * 4 * 2
        self.assertEqual(data[at:at + 4], bytes([0xC9, 0xD1, 0xC9, 0xE1]))
        self.assertEqual(len(data), 12 + 2 * (32 + 32 + 4))

    def test_recorded_groups_must_match_bfs(self):
        make_session(self.db, groups=[0, 1, 0, 1])
        with self.assertRaisesRegex(ValueError, "recorded group 1, BFS position 1"):
            so.export([self.db], kv_heads=1, group_sizes=[2], rounds_kept=1)

    def test_bfs_order_children_in_row_order(self):
        self.assertEqual(so.bfs_order([-1, 0, 1, 0, 2, 3]), [0, 1, 3, 2, 5, 4])


if __name__ == "__main__":
    unittest.main()
