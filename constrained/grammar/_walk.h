// Declarations shared by the sources of constrained.grammar._walk (_walk.cpp: the walk; _walk_helpers.cpp: the
// compiled twins of a few Python helpers; _walk_advance.cpp: the stack expansion).
#pragma once
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdint>
#include <cstring>

namespace walk_helpers {
// The rows of a bool over rows (bool bytes: 0 or 1 each) that are set: their count, eight rows at a time
inline Py_ssize_t count_rows(const uint8_t* a, Py_ssize_t n) {
    Py_ssize_t count = 0, r = 0;
    for (; r + 8 <= n; r += 8) {
        uint64_t word;
        std::memcpy(&word, a + r, 8);
        count += (Py_ssize_t)(((word & 0x0101010101010101ULL) * 0x0101010101010101ULL) >> 56);
    }
    for (; r < n; r++) count += a[r] != 0;
    return count;
}

// visit(r) for every row r < n whose byte is set (want) or not (!want), eight rows at a time skipped where none of
// them is (their word all zeros, or all ones when !want; any other byte is read one by one); false as soon as a
// visit returns false (a Python error set)
template <class Visit>
inline bool for_each_row(const uint8_t* a, Py_ssize_t n, bool want, Visit&& visit) {
    const uint64_t skip = want ? 0 : 0x0101010101010101ULL;
    for (Py_ssize_t r = 0; r < n;) {
        if (r + 8 <= n) {
            uint64_t word;
            std::memcpy(&word, a + r, 8);
            if (word == skip) {
                r += 8;
                continue;
            }
        }
        if ((a[r] != 0) == want && !visit(r)) return false;
        r++;
    }
    return true;
}

PyObject* closure_bytes(PyObject*, PyObject* args);
PyObject* first_rows(PyObject*, PyObject* args);
PyObject* pack_rows(PyObject*, PyObject* args);
PyObject* by_rows(PyObject*, PyObject* args);
PyObject* set_rows(PyObject*, PyObject* args);
PyObject* set_bits(PyObject*, PyObject* args);
// _walk_vocab.cpp: tokenindex._vocab_table's decoding loop
PyObject* decode_pieces(PyObject*, PyObject* args);
// _walk_advance.cpp: GrammarRules.advance (stacks.py)
PyObject* advance_table(PyObject*, PyObject* args);
PyObject* advance(PyObject*, PyObject* args);
// packed bits over ids of a bool over rows (id: row -> id, inv: id -> row or null); false with a Python error set
bool pack_by_rows(const uint8_t* a, const int32_t* id, const int32_t* inv, Py_ssize_t n, uint8_t* bits);
}  // namespace walk_helpers
