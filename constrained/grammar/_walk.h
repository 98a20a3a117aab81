// Declarations shared by the sources of constrained.grammar._walk (_walk.cpp: the walk; _walk_helpers.cpp: the
// compiled twins of a few Python helpers).
#pragma once
#define PY_SSIZE_T_CLEAN
#include <Python.h>

namespace walk_helpers {
PyObject* closure_bytes(PyObject*, PyObject* args);
PyObject* first_rows(PyObject*, PyObject* args);
PyObject* pack_rows(PyObject*, PyObject* args);
}  // namespace walk_helpers
