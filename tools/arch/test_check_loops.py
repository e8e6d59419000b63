#!/usr/bin/env python3
"""check_loops.py on small CMake projects built here: objects are matched to their
sources exactly, from what CMake recorded (a file named with "__", which CMake also
writes for "../", or one outside the project keeps its call edges), and an object CMake
no longer lists is not part of the tree.

usage: test_check_loops.py CMAKE C_COMPILER [unittest options]
"""
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
CMAKE, CC = "cmake", "cc"


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(textwrap.dedent(text))


def build(src, bld):
    for cmd in ([CMAKE, "-S", src, "-B", bld, "-DCMAKE_C_COMPILER=" + CC],
                [CMAKE, "--build", bld]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            raise AssertionError("%s failed:\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))


def check(src, bld):
    r = subprocess.run([sys.executable, os.path.join(HERE, "check_loops.py"), src, bld],
                       capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


class CheckLoops(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.src = os.path.join(self.tmp.name, "src")
        self.bld = os.path.join(self.tmp.name, "build")

    def tearDown(self):
        self.tmp.cleanup()

    def project(self, sources):
        write(os.path.join(self.src, "CMakeLists.txt"), """\
            cmake_minimum_required(VERSION 3.16)
            project(loops C)
            add_library(t STATIC %s)
            """ % " ".join(sources))

    def test_loop_through_a_file_named_with_double_underscore(self):
        # x__y.c and z.c call each other; "x__y" must not be read back as "x..y"
        write(os.path.join(self.src, "x__y.c"), "int z(void);\nint x(void) { return z(); }\n")
        write(os.path.join(self.src, "z.c"), "int x(void);\nint z(void) { return x() + 1; }\n")
        self.project(["x__y.c", "z.c"])
        build(self.src, self.bld)
        rc, out = check(self.src, self.bld)
        self.assertEqual(rc, 1, out)
        self.assertIn("call loop in CMakeFiles/t.dir: x__y.c <-> z.c", out)
        self.assertIn("x__y.c -> z.c (z)", out)
        self.assertIn("1 loop(s)", out)

    def test_source_outside_the_source_folder_is_named_by_its_path(self):
        # CMake names the object of a file outside the project by its absolute path
        # (TMP/up.c.o), which no decoding of the name leads back to
        write(os.path.join(self.tmp.name, "up.c"), "int d(void);\nint u(void) { return d(); }\n")
        write(os.path.join(self.src, "d.c"), "int u(void);\nint d(void) { return u(); }\n")
        self.project(["../up.c", "d.c"])
        build(self.src, self.bld)
        rc, out = check(self.src, self.bld)
        self.assertEqual(rc, 1, out)
        self.assertIn("../up.c <-> d.c", out)

    def test_object_no_longer_listed_is_not_part_of_the_tree(self):
        write(os.path.join(self.src, "a.c"), "int b(void);\nint a(void) { return b(); }\n")
        write(os.path.join(self.src, "b.c"), "int a(void);\nint b(void) { return a(); }\n")
        self.project(["a.c", "b.c"])
        build(self.src, self.bld)
        self.assertEqual(check(self.src, self.bld)[0], 1)
        # b.c leaves the target (its file and its old object stay): the loop is gone
        self.project(["a.c"])
        build(self.src, self.bld)
        self.assertTrue(os.path.exists(os.path.join(self.bld, "CMakeFiles", "t.dir", "b.c.o")))
        rc, out = check(self.src, self.bld)
        self.assertEqual(rc, 0, out)
        self.assertIn("0 loop(s)", out)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and not sys.argv[1].startswith("-"):
        CMAKE, CC = sys.argv[1], sys.argv[2]
        del sys.argv[1:3]
    unittest.main(verbosity=2)
