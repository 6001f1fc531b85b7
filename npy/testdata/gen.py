#!/usr/bin/env python3
"""Writes the reference .npy files of package npy's tests with NumPy itself.

Setup tool only (tests read the committed files, never run this). Rerun with
a NumPy installed:  python3 npy/testdata/gen.py  (from the repository root).
The values written here are repeated literally in npy_test.go.
"""
import os
import numpy as np
from numpy.lib import format as npformat

out = os.path.dirname(os.path.abspath(__file__))


def save(name, arr, version=None):
    with open(os.path.join(out, name), "wb") as f:
        npformat.write_array(f, arr, version=version, allow_pickle=False)


save("f4_c.npy", np.array([[0.5, -1.0, 2.25], [3.0, -0.0, 1e-3]], "<f4"))
save("f8_fortran_be.npy", np.asfortranarray(np.array([[1, 2, 3], [4, 5, 6]], ">f8")))
save("i4_3d_fortran.npy", np.asfortranarray(np.arange(24, dtype="<i4").reshape(2, 3, 4) - 12))
save("i1.npy", np.array([-128, -1, 0, 127], "i1"))
save("u1.npy", np.array([0, 255, 7], "u1"))
save("i2_be.npy", np.array([-2, 300], ">i2"))
save("u2.npy", np.array([65535, 1], "<u2"))
save("u4.npy", np.array([4294967295, 0], "<u4"))
save("i8_scalar.npy", np.array(-5, "<i8"))
save("u8_be.npy", np.array([2**64 - 1, 1], ">u8"))
save("b1.npy", np.array([[True, False], [False, True]]))
save("f2.npy", np.array([1, -2, np.inf, 2.0**-24, 65504], "<f2"))
save("empty_f4.npy", np.zeros((0, 3), "<f4"))
save("i8_v2.npy", np.arange(3, dtype="<i8"), version=(2, 0))
save("f4_v3.npy", np.array([1.5], "<f4"), version=(3, 0))
save("c8.npy", np.array([1 + 2j, -3.5j], "<c8"))
save("c16_be.npy", np.array([0.25 - 1j], ">c16"))
save("void2.npy", np.zeros(2, "V2"))  # what bfloat16 arrays of ml_dtypes look like
save("unicode.npy", np.array(["ab"]))
save("structured.npy", np.zeros(2, dtype=[("a", "<i4")]))
