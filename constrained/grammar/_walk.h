// Declarations shared by the sources of constrained.grammar._walk (_walk.cpp: the walk; _walk_helpers.cpp: the
// compiled twins of a few Python helpers; _walk_advance.cpp: the stack expansion).
#pragma once
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdint>

namespace walk_helpers {
PyObject* closure_bytes(PyObject*, PyObject* args);
PyObject* first_rows(PyObject*, PyObject* args);
PyObject* pack_rows(PyObject*, PyObject* args);
PyObject* by_rows(PyObject*, PyObject* args);
PyObject* set_rows(PyObject*, PyObject* args);
PyObject* set_bits(PyObject*, PyObject* args);
// _walk_advance.cpp: GrammarRules.advance (stacks.py)
PyObject* advance_table(PyObject*, PyObject* args);
PyObject* advance(PyObject*, PyObject* args);
// packed bits over ids of a bool over rows (id: row -> id, inv: id -> row or null); false with a Python error set
bool pack_by_rows(const uint8_t* a, const int32_t* id, const int32_t* inv, Py_ssize_t n, uint8_t* bits);
}  // namespace walk_helpers
