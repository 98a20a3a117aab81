// decode_pieces: the decoding loop of tokenindex._vocab_table (the vocabulary's token table) compiled: every piece
// decoded from a clean state with llama.cpp's lenient decode_utf8 (src/llama-grammar.cpp; tokenindex.decode_utf8 is
// the Python reference), cut at a NUL byte, its code points cut at the first 0 (apply_view). The Python loop stays
// the reference; tests/grammar/test_vocab_decode.py compares the tables both build bit for bit.
#include "_walk.h"

#include <cstdint>
#include <cstring>
#include <vector>

namespace walk_helpers {

namespace {

const int kLookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4};

PyObject* int64_bytes(const std::vector<int64_t>& v) {
    PyObject* b = PyByteArray_FromStringAndSize(nullptr, (Py_ssize_t)(v.size() * sizeof(int64_t)));
    if (b && !v.empty()) std::memcpy(PyByteArray_AS_STRING(b), v.data(), v.size() * sizeof(int64_t));
    return b;
}

}  // namespace

PyObject* decode_pieces(PyObject*, PyObject* args) {
    PyObject* pieces;
    Py_buffer skip{};
    if (!PyArg_ParseTuple(args, "O!y*", &PyTuple_Type, &pieces, &skip)) return nullptr;
    const Py_ssize_t n = PyTuple_GET_SIZE(pieces);
    if (skip.len != n) {
        PyBuffer_Release(&skip);
        PyErr_SetString(PyExc_ValueError, "decode_pieces: skip must hold one byte per piece");
        return nullptr;
    }
    const uint8_t* sk = (const uint8_t*)skip.buf;
    std::vector<int64_t> length((size_t)n, 0), rem((size_t)n, 0), val((size_t)n, 0), flat;
    std::vector<int64_t> cps;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject* p = PyTuple_GET_ITEM(pieces, i);
        if (!PyBytes_Check(p)) {
            PyBuffer_Release(&skip);
            PyErr_SetString(PyExc_TypeError, "decode_pieces: pieces must be bytes");
            return nullptr;
        }
        if (sk[i]) {
            rem[(size_t)i] = -1;
            continue;
        }
        const uint8_t* s = (const uint8_t*)PyBytes_AS_STRING(p);
        Py_ssize_t len = PyBytes_GET_SIZE(p);
        const void* nul = std::memchr(s, 0, (size_t)len);
        if (nul) len = (const uint8_t*)nul - s;
        cps.clear();
        int64_t value = 0, r = 0;
        bool bad = false;
        for (Py_ssize_t pos = 0; pos < len;) {
            const uint8_t first = s[pos];
            r = kLookup[first >> 4] - 1;
            if (r < 0) {
                bad = true;
                break;
            }
            value = first & ((1 << (7 - r)) - 1);
            pos++;
            while (pos < len && r > 0) {
                value = (value << 6) + (s[pos] & 0x3F);
                pos++;
                r--;
            }
            if (r == 0) cps.push_back(value);
        }
        if (bad) {
            rem[(size_t)i] = -1;
            continue;
        }
        size_t k = 0;
        while (k < cps.size() && cps[k] != 0) k++;  // apply_view: up to the first 0
        flat.insert(flat.end(), cps.begin(), cps.begin() + (Py_ssize_t)k);
        length[(size_t)i] = (int64_t)k;
        rem[(size_t)i] = r;
        val[(size_t)i] = r > 0 ? value : 0;
    }
    PyBuffer_Release(&skip);
    PyObject* a = int64_bytes(length);
    PyObject* b = a ? int64_bytes(rem) : nullptr;
    PyObject* c = b ? int64_bytes(val) : nullptr;
    PyObject* d = c ? int64_bytes(flat) : nullptr;
    if (!d) {
        Py_XDECREF(a);
        Py_XDECREF(b);
        Py_XDECREF(c);
        return nullptr;
    }
    return Py_BuildValue("(NNNN)", a, b, c, d);
}

}  // namespace walk_helpers
