// constrained.vocab._read: the loop of Vocabulary.from_llama (vocabulary.py) compiled. For every token id it calls
// llama.cpp's own C API, llama_token_to_piece(vocab, id, buf, len, 0, true), llama_vocab_is_eog(vocab, id) and
// llama_vocab_get_attr(vocab, id), through the function addresses ctypes gives for llama-cpp-python's libllama (so
// this module does not link libllama and never disagrees with the library the model was loaded with). The Python
// loop in Vocabulary.from_llama stays the reference; tests/vocab/test_vocab_read.py compares both bit for bit.
//
// The C calls run without the GIL (a server thread keeps answering meanwhile); the bytes objects are made after.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdint>
#include <string>
#include <vector>

namespace {

typedef int32_t (*piece_fn)(const void*, int32_t, char*, int32_t, int32_t, bool);
typedef bool (*eog_fn)(const void*, int32_t);
typedef int (*attr_fn)(const void*, int32_t);  // enum llama_token_attr

PyObject* read_vocab(PyObject*, PyObject* args) {
    unsigned long long vocab_addr, piece_addr, eog_addr, attr_addr;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "KnKKK", &vocab_addr, &n, &piece_addr, &eog_addr, &attr_addr)) return nullptr;
    if (!vocab_addr || !piece_addr || !eog_addr || !attr_addr || n < 0 || n > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "read_vocab: null address or bad token count");
        return nullptr;
    }
    const void* vocab = (const void*)(uintptr_t)vocab_addr;
    piece_fn piece = (piece_fn)(uintptr_t)piece_addr;
    eog_fn is_eog = (eog_fn)(uintptr_t)eog_addr;
    attr_fn get_attr = (attr_fn)(uintptr_t)attr_addr;

    std::string blob;
    std::vector<Py_ssize_t> off((size_t)n + 1, 0);
    std::vector<int> attrs((size_t)n);
    std::vector<int32_t> eog;
    bool failed = false;
    Py_BEGIN_ALLOW_THREADS
    try {
        blob.reserve((size_t)n * 8);
        std::vector<char> buf(256);
        for (Py_ssize_t i = 0; i < n; i++) {
            int32_t k = piece(vocab, (int32_t)i, buf.data(), (int32_t)buf.size(), 0, true);
            if (k < 0) {  // as the Python loop: a buffer of -k + 16 bytes, asked again
                buf.resize((size_t)(-(int64_t)k) + 16);
                k = piece(vocab, (int32_t)i, buf.data(), (int32_t)buf.size(), 0, true);
            }
            if (k > 0) blob.append(buf.data(), (size_t)k);
            off[(size_t)i + 1] = (Py_ssize_t)blob.size();
            if (is_eog(vocab, (int32_t)i)) eog.push_back((int32_t)i);
            attrs[(size_t)i] = get_attr(vocab, (int32_t)i);
        }
    } catch (...) {
        failed = true;
    }
    Py_END_ALLOW_THREADS
    if (failed) return PyErr_NoMemory();

    PyObject* pieces = PyTuple_New(n);
    PyObject* attr_t = PyTuple_New(n);
    PyObject* eog_l = PyList_New((Py_ssize_t)eog.size());
    if (!pieces || !attr_t || !eog_l) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject* b = PyBytes_FromStringAndSize(blob.data() + off[(size_t)i], off[(size_t)i + 1] - off[(size_t)i]);
        if (!b) goto fail;
        PyTuple_SET_ITEM(pieces, i, b);
        PyObject* a = PyLong_FromLong(attrs[(size_t)i]);
        if (!a) goto fail;
        PyTuple_SET_ITEM(attr_t, i, a);
    }
    for (size_t j = 0; j < eog.size(); j++) {
        PyObject* e = PyLong_FromLong(eog[j]);
        if (!e) goto fail;
        PyList_SET_ITEM(eog_l, (Py_ssize_t)j, e);
    }
    return Py_BuildValue("(NNN)", pieces, attr_t, eog_l);
fail:
    Py_XDECREF(pieces);
    Py_XDECREF(attr_t);
    Py_XDECREF(eog_l);
    return nullptr;
}

// gguf_meta._Cursor.skip_string repeated count times (a GGUF string array skipped): the offset after the array,
// or -1 where a length runs past the buffer (the caller then reports the truncation as the Python loop does)
PyObject* skip_strings(PyObject*, PyObject* args) {
    Py_buffer b{};
    Py_ssize_t pos;
    unsigned long long count;
    if (!PyArg_ParseTuple(args, "y*nK", &b, &pos, &count)) return nullptr;
    const uint8_t* p = (const uint8_t*)b.buf;
    const uint64_t len = (uint64_t)b.len;
    uint64_t at = pos < 0 ? len + 1 : (uint64_t)pos;
    bool bad = at > len;
    for (unsigned long long i = 0; i < count && !bad; i++) {
        if (len - at < 8) {
            bad = true;
            break;
        }
        uint64_t n = 0;
        for (int k = 7; k >= 0; k--) n = (n << 8) | p[at + (uint64_t)k];  // little-endian uint64
        at += 8;
        if (n > len - at) {
            bad = true;
            break;
        }
        at += n;
    }
    PyBuffer_Release(&b);
    return PyLong_FromLongLong(bad ? -1 : (long long)at);
}

PyMethodDef methods[] = {
    {"skip_strings", (PyCFunction)skip_strings, METH_VARARGS,
     "skip_strings(buffer, pos, count) -> the offset after count GGUF strings from pos, or -1 (truncated)."},
    {"read_vocab", (PyCFunction)read_vocab, METH_VARARGS,
     "read_vocab(vocab, n, token_to_piece, is_eog, get_attr) -> (pieces, attrs, eog_ids): addresses as ints."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_read",
                      "Vocabulary.from_llama's per-token loop over llama.cpp's C API, compiled (optional).", -1,
                      methods};

}  // namespace

PyMODINIT_FUNC PyInit__read(void) { return PyModule_Create(&module); }
