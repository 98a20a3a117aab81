// Helpers of constrained.grammar._walk beside the walk itself (_walk.cpp), each the compiled twin of a Python
// function that stays the reference (the tests compare both bit for bit):
//   closure_bytes  GrammarRules._closure_digest's byte stream (stacks.py), hashed by the caller with blake2b
//   first_rows     charclass._first_rows: the rows whose first code point a class matches, ascending
//   pack_rows      packing.pack_by_id: packed bits over ids of a bool over a table's rows
//   by_rows, set_rows, set_bits: a mask over ids read over rows, rows set into it, ids set in a packed row
#include "_walk.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <utility>
#include <vector>

namespace walk_helpers {

namespace {

struct Ref {  // an owned reference
    PyObject* p = nullptr;
    explicit Ref(PyObject* o) : p(o) {}
    Ref(const Ref&) = delete;
    Ref& operator=(const Ref&) = delete;
    ~Ref() { Py_XDECREF(p); }
    PyObject* release() {
        PyObject* o = p;
        p = nullptr;
        return o;
    }
};

struct View {  // a read-only (or writable) C-contiguous buffer
    Py_buffer v{};
    bool held = false;
    bool open(PyObject* o, Py_ssize_t itemsize, bool writable = false) {
        if (PyObject_GetBuffer(o, &v, writable ? (PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) : PyBUF_C_CONTIGUOUS) < 0)
            return false;
        held = true;
        if (v.len % itemsize != 0) {
            PyErr_SetString(PyExc_TypeError, "_walk: unexpected buffer item size");
            return false;
        }
        return true;
    }
    Py_ssize_t items(Py_ssize_t itemsize) const { return v.len / itemsize; }
    ~View() {
        if (held) PyBuffer_Release(&v);
    }
};

// a Python list of ints, read in place
bool list_int(PyObject* list, Py_ssize_t i, int64_t& out) {
    if (i < 0 || i >= PyList_GET_SIZE(list)) {
        PyErr_SetString(PyExc_IndexError, "closure_bytes: position out of range");
        return false;
    }
    long long v = PyLong_AsLongLong(PyList_GET_ITEM(list, i));
    if (v == -1 && PyErr_Occurred()) return false;
    out = v;
    return true;
}

void put64(std::vector<char>& out, int64_t x) {
    char b[8];
    std::memcpy(b, &x, 8);   // native order, as array("q").tobytes()
    out.insert(out.end(), b, b + 8);
}

}  // namespace

// closure_bytes(types: list[int], values: list[int], rule_start: list[int], bottom: int, rules: tuple[int, ...],
//               max_elements: int, rule_ref: int) -> bytes | None
// The rules reachable from `rules`, renumbered in order of discovery: per rule its element count, its types, its
// values with rule references as -1, then the discovery numbers of the rules it references; None past
// max_elements elements in all. Exactly the bytes GrammarRules._closure_digest feeds to blake2b.
PyObject* closure_bytes(PyObject*, PyObject* args) {
    PyObject *types, *values, *starts, *rules;
    long long bottom, max_elements, rule_ref;
    if (!PyArg_ParseTuple(args, "O!O!O!LO!LL", &PyList_Type, &types, &PyList_Type, &values, &PyList_Type, &starts,
                          &bottom, &PyTuple_Type, &rules, &max_elements, &rule_ref))
        return nullptr;
    try {
        const Py_ssize_t n_rules = PyList_GET_SIZE(starts);
        std::unordered_map<int64_t, int64_t> canon;
        std::vector<int64_t> order;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(rules); i++) {
            long long r = PyLong_AsLongLong(PyTuple_GET_ITEM(rules, i));
            if (r == -1 && PyErr_Occurred()) return nullptr;
            canon[r] = i;          // as {r: i for i, r in enumerate(rules)} and order = list(rules)
            order.push_back(r);
        }
        std::vector<char> out;
        std::vector<int64_t> idx;
        int64_t seen = 0;
        for (size_t k = 0; k < order.size(); k++) {
            const int64_t r = order[k];
            int64_t start, stop;
            if (r < 0 || r >= n_rules) {
                PyErr_SetString(PyExc_IndexError, "closure_bytes: rule out of range");
                return nullptr;
            }
            if (!list_int(starts, (Py_ssize_t)r, start)) return nullptr;
            if (r + 1 < n_rules) {
                if (!list_int(starts, (Py_ssize_t)(r + 1), stop)) return nullptr;
            } else {
                stop = bottom;
            }
            const int64_t len = stop - start;
            seen += len > max_elements + 1 ? len : len - 1;
            if (seen > max_elements) Py_RETURN_NONE;
            put64(out, len);
            const size_t at_values = out.size() + 8 * (size_t)len;
            out.resize(out.size() + 16 * (size_t)len);
            idx.clear();
            for (int64_t j = 0; j < len; j++) {
                int64_t t, v;
                if (!list_int(types, (Py_ssize_t)(start + j), t) || !list_int(values, (Py_ssize_t)(start + j), v))
                    return nullptr;
                std::memcpy(out.data() + at_values - 8 * (size_t)len + 8 * (size_t)j, &t, 8);
                int64_t shown = v;
                if (t == rule_ref) {
                    shown = -1;
                    auto it = canon.find(v);
                    if (it == canon.end()) {
                        it = canon.emplace(v, (int64_t)order.size()).first;
                        order.push_back(v);
                    }
                    idx.push_back(it->second);
                }
                std::memcpy(out.data() + at_values + 8 * (size_t)j, &shown, 8);
            }
            for (int64_t c : idx) put64(out, c);
        }
        return PyBytes_FromStringAndSize(out.data(), (Py_ssize_t)out.size());
    } catch (std::bad_alloc&) {
        return PyErr_NoMemory();
    }
}

// first_rows(cp0: int64 buffer, order0: int64 buffer, positive: bool, items: tuple of (lo, hi)) -> bytearray
// charclass._first_rows: the rows (int64, ascending, each once) whose first code point the class matches, from the
// table's rows sorted by first code point (order0, a permutation of the rows with a code point; cp0 their first
// code points, ascending).
PyObject* first_rows(PyObject*, PyObject* args) {
    PyObject *cp0_o, *order0_o, *items_o;
    int positive;
    if (!PyArg_ParseTuple(args, "OOpO!", &cp0_o, &order0_o, &positive, &PyTuple_Type, &items_o)) return nullptr;
    try {
        View vc, vo;
        if (!vc.open(cp0_o, 8) || !vo.open(order0_o, 8)) return nullptr;
        const Py_ssize_t m = vo.items(8);
        if (vc.items(8) != m) {
            PyErr_SetString(PyExc_ValueError, "first_rows: cp0 and order0 differ in length");
            return nullptr;
        }
        const int64_t* cp0 = (const int64_t*)vc.v.buf;
        const int64_t* order0 = (const int64_t*)vo.v.buf;
        std::vector<std::pair<Py_ssize_t, Py_ssize_t>> spans;   // positions in cp0 of each item's code points
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items_o); i++) {
            PyObject* it = PyTuple_GET_ITEM(items_o, i);
            if (!PyTuple_Check(it) || PyTuple_GET_SIZE(it) != 2) {
                PyErr_SetString(PyExc_TypeError, "first_rows: items must be (lo, hi) pairs");
                return nullptr;
            }
            long long lo = PyLong_AsLongLong(PyTuple_GET_ITEM(it, 0));
            long long hi = PyLong_AsLongLong(PyTuple_GET_ITEM(it, 1));
            if (PyErr_Occurred()) return nullptr;
            Py_ssize_t a = std::lower_bound(cp0, cp0 + m, (int64_t)lo) - cp0;
            Py_ssize_t b = std::upper_bound(cp0, cp0 + m, (int64_t)hi) - cp0;
            if (b > a) spans.emplace_back(a, b);
        }
        std::sort(spans.begin(), spans.end());
        std::vector<std::pair<Py_ssize_t, Py_ssize_t>> in, out;   // the selected positions and the others
        Py_ssize_t at = 0;
        for (const auto& sp : spans) {   // disjoint runs: the union of the spans and its complement
            if (sp.first > at) out.emplace_back(at, sp.first);
            if (sp.second > at) in.emplace_back(std::max(at, sp.first), sp.second);
            at = std::max(at, sp.second);
        }
        if (at < m) out.emplace_back(at, m);
        if (!positive) in.swap(out);
        Py_ssize_t total = 0, other = 0;
        for (const auto& sp : in) total += sp.second - sp.first;
        for (const auto& sp : out) other += sp.second - sp.first;
        Ref res(PyByteArray_FromStringAndSize(nullptr, total * 8));
        if (!res.p) return nullptr;
        int64_t* r = (int64_t*)PyByteArray_AS_STRING(res.p);
        if (total * 64 <= m) {   // few: gathered and sorted
            Py_ssize_t w = 0;
            for (const auto& sp : in)
                for (Py_ssize_t j = sp.first; j < sp.second; j++) r[w++] = order0[j];
            std::sort(r, r + w);
        } else {                 // many: a bitmap over the rows, the smaller side marked, read in order
            const bool mark_in = total <= other;
            std::vector<uint8_t> mark((size_t)m, mark_in ? 0 : 1);
            for (const auto& sp : mark_in ? in : out)
                for (Py_ssize_t j = sp.first; j < sp.second; j++) {
                    int64_t row = order0[j];
                    if (row < 0 || row >= m) {
                        PyErr_SetString(PyExc_ValueError, "first_rows: order0 is not a permutation of the rows");
                        return nullptr;
                    }
                    mark[(size_t)row] = mark_in ? 1 : 0;
                }
            Py_ssize_t w = 0, i = 0;
            for (; i < m && w + 1 < total; i++) {   // branch-free: write always, advance where marked
                r[w] = i;
                w += mark[(size_t)i];
            }
            for (; i < m && w < total; i++)
                if (mark[(size_t)i]) r[w++] = i;
            if (w != total) {
                PyErr_SetString(PyExc_ValueError, "first_rows: order0 is not a permutation of the rows");
                return nullptr;
            }
        }
        return res.release();
    } catch (std::bad_alloc&) {
        return PyErr_NoMemory();
    }
}

// Packed bits over ids (np.packbits order, n bits) of `a`, a bool over the rows of a table holding every id once
// (id[r]: the id of row r; inv[i]: the row of id i, or null). Few accepted rows (found in one pass that skips 64 clear
// rows at a time, most walks' case) are scattered; few rejected ones too,
// onto all ones; otherwise gathered in id order through inv (reads, not random writes), or without inv scattered as
// bytes. False (a Python error set) on an id or row out of range.
bool pack_by_rows(const uint8_t* a, const int32_t* id, const int32_t* inv, Py_ssize_t n, uint8_t* bits) {
    const Py_ssize_t nb = (n + 7) / 8;
    Py_ssize_t count;
    {   // the usual case first: few rows set, collected in one pass that skips 64 clear rows at a time
        std::vector<Py_ssize_t> few;
        Py_ssize_t r = 0;
        bool sparse = true;
        for (; r + 64 <= n && sparse; r += 64) {
            uint64_t w[8];
            std::memcpy(w, a + r, 64);
            if ((w[0] | w[1] | w[2] | w[3] | w[4] | w[5] | w[6] | w[7]) == 0) continue;
            for (int j = 0; j < 8; j++) {
                // the high bit of each nonzero byte, then one step per set byte
                uint64_t hi = (((w[j] & 0x7F7F7F7F7F7F7F7FULL) + 0x7F7F7F7F7F7F7F7FULL) | w[j]) & 0x8080808080808080ULL;
                for (; hi; hi &= hi - 1) few.push_back(r + 8 * j + (__builtin_ctzll(hi) >> 3));
            }
            sparse = (Py_ssize_t)few.size() * 16 <= n;
        }
        for (; r < n && sparse; r++)
            if (a[r]) few.push_back(r);
        if (sparse && (Py_ssize_t)few.size() * 16 <= n) {
            std::memset(bits, 0, (size_t)nb);
            for (Py_ssize_t x : few) {
                uint32_t i = (uint32_t)id[x];
                if (i >= (uint32_t)n) {
                    PyErr_SetString(PyExc_ValueError, "pack: id out of range");
                    return false;
                }
                bits[i >> 3] |= (uint8_t)(0x80 >> (i & 7));
            }
            return true;
        }
        count = (Py_ssize_t)few.size() + count_rows(a + r, n - r);   // the rows before r are in `few`
    }
    const bool sparse = count * 64 <= n, full = (n - count) * 64 <= n;
    if (sparse || full) {   // scatter the few rows on the other side, eight rows at a time where none is there
        std::memset(bits, sparse ? 0 : 0xFF, (size_t)nb);
        if (!sparse && n % 8) bits[nb - 1] = (uint8_t)(0xFF << (8 - n % 8));   // no bits past the n ids
        return for_each_row(a, n, sparse, [&](Py_ssize_t r) {
            uint32_t i = (uint32_t)id[r];
            if (i >= (uint32_t)n) {
                PyErr_SetString(PyExc_ValueError, "pack: id out of range");
                return false;
            }
            if (sparse) bits[i >> 3] |= (uint8_t)(0x80 >> (i & 7));
            else bits[i >> 3] &= (uint8_t)~(0x80 >> (i & 7));
            return true;
        });
    }
    if (inv) {   // dense both ways: gathered in id order
        for (Py_ssize_t j = 0; j < nb; j++) {
            uint8_t b = 0;
            for (Py_ssize_t i = 8 * j; i < 8 * j + 8; i++) {
                bool on = false;
                if (i < n) {
                    uint32_t r = (uint32_t)inv[i];
                    if (r >= (uint32_t)n) {
                        PyErr_SetString(PyExc_ValueError, "pack: row out of range");
                        return false;
                    }
                    on = a[r] != 0;
                }
                b = (uint8_t)(b << 1 | on);
            }
            bits[j] = b;
        }
        return true;
    }
    std::vector<uint8_t> by((size_t)nb * 8, 0);   // bytes in id order, then packed
    for (Py_ssize_t r = 0; r < n; r++) {
        uint32_t i = (uint32_t)id[r];
        if (i >= (uint32_t)n) {
            PyErr_SetString(PyExc_ValueError, "pack: id out of range");
            return false;
        }
        by[i] = a[r] != 0;
    }
    for (Py_ssize_t j = 0; j < nb; j++) {
        const uint8_t* q = by.data() + 8 * j;
        bits[j] = (uint8_t)(q[0] << 7 | q[1] << 6 | q[2] << 5 | q[3] << 4 | q[4] << 3 | q[5] << 2 | q[6] << 1 | q[7]);
    }
    return true;
}

// pack_rows(acc: bool over rows, ids: int32 id of each row, inv: int32 row of each id) -> bytearray
// packing.pack_by_id for a table holding every id once (see pack_by_rows).
PyObject* pack_rows(PyObject*, PyObject* args) {
    PyObject *acc_o, *ids_o, *inv_o;
    if (!PyArg_ParseTuple(args, "OOO", &acc_o, &ids_o, &inv_o)) return nullptr;
    try {
        View va, vi, vv;
        if (!va.open(acc_o, 1) || !vi.open(ids_o, 4) || !vv.open(inv_o, 4)) return nullptr;
        const Py_ssize_t n = va.items(1);
        if (vi.items(4) != n || vv.items(4) != n) {
            PyErr_SetString(PyExc_ValueError, "pack_rows: acc, ids and inv differ in length");
            return nullptr;
        }
        Ref out(PyByteArray_FromStringAndSize(nullptr, (n + 7) / 8));
        if (!out.p) return nullptr;
        if (!pack_by_rows((const uint8_t*)va.v.buf, (const int32_t*)vi.v.buf, (const int32_t*)vv.v.buf, n,
                          (uint8_t*)PyByteArray_AS_STRING(out.p)))
            return nullptr;
        return out.release();
    } catch (std::bad_alloc&) {
        return PyErr_NoMemory();
    }
}

// by_rows(mask: bool over ids, ids: int32 id of each row) -> bytearray: mask[ids], the mask over a table's rows
PyObject* by_rows(PyObject*, PyObject* args) {
    PyObject *m_o, *ids_o;
    if (!PyArg_ParseTuple(args, "OO", &m_o, &ids_o)) return nullptr;
    try {
        View vm, vi;
        if (!vm.open(m_o, 1) || !vi.open(ids_o, 4)) return nullptr;
        const Py_ssize_t n = vi.items(4), nm = vm.items(1);
        const uint8_t* m = (const uint8_t*)vm.v.buf;
        const int32_t* id = (const int32_t*)vi.v.buf;
        Ref out(PyByteArray_FromStringAndSize(nullptr, n));
        if (!out.p) return nullptr;
        uint8_t* r = (uint8_t*)PyByteArray_AS_STRING(out.p);
        for (Py_ssize_t i = 0; i < n; i++) {
            uint32_t t = (uint32_t)id[i];
            if (t >= (uint32_t)nm) {
                PyErr_SetString(PyExc_ValueError, "by_rows: id out of range");
                return nullptr;
            }
            r[i] = m[t] != 0;
        }
        return out.release();
    } catch (std::bad_alloc&) {
        return PyErr_NoMemory();
    }
}

// set_rows(mask: writable bool over ids, acc: bool over rows, ids: int32 id of each row) -> None:
// mask[ids[acc]] = True
PyObject* set_rows(PyObject*, PyObject* args) {
    PyObject *m_o, *a_o, *ids_o;
    if (!PyArg_ParseTuple(args, "OOO", &m_o, &a_o, &ids_o)) return nullptr;
    View vm, va, vi;
    if (!vm.open(m_o, 1, true) || !va.open(a_o, 1) || !vi.open(ids_o, 4)) return nullptr;
    const Py_ssize_t n = vi.items(4), nm = vm.items(1);
    if (va.items(1) != n) {
        PyErr_SetString(PyExc_ValueError, "set_rows: acc and ids differ in length");
        return nullptr;
    }
    uint8_t* m = (uint8_t*)vm.v.buf;
    const uint8_t* a = (const uint8_t*)va.v.buf;
    const int32_t* id = (const int32_t*)vi.v.buf;
    const bool ok = for_each_row(a, n, true, [&](Py_ssize_t r) {
        uint32_t t = (uint32_t)id[r];
        if (t >= (uint32_t)nm) {
            PyErr_SetString(PyExc_ValueError, "set_rows: id out of range");
            return false;
        }
        m[t] = 1;
        return true;
    });
    if (!ok) return nullptr;
    Py_RETURN_NONE;
}

// set_bits(out: writable uint8, arrays: tuple of int64 id arrays) -> None: bit i & 7 (least significant first) of
// byte i >> 3 set for every id i (a state's uncertain tokens onto a packed row)
PyObject* set_bits(PyObject*, PyObject* args) {
    PyObject *out_o, *arrays;
    if (!PyArg_ParseTuple(args, "OO!", &out_o, &PyTuple_Type, &arrays)) return nullptr;
    View vo;
    if (!vo.open(out_o, 1, true)) return nullptr;
    uint8_t* out = (uint8_t*)vo.v.buf;
    const uint64_t nbits = (uint64_t)vo.items(1) * 8;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(arrays); k++) {
        View va;
        if (!va.open(PyTuple_GET_ITEM(arrays, k), 8)) return nullptr;
        const int64_t* ids = (const int64_t*)va.v.buf;
        for (Py_ssize_t j = 0; j < va.items(8); j++) {
            uint64_t i = (uint64_t)ids[j];
            if (i >= nbits) {
                PyErr_SetString(PyExc_ValueError, "set_bits: id out of range");
                return nullptr;
            }
            out[i >> 3] |= (uint8_t)(1u << (i & 7));
        }
    }
    Py_RETURN_NONE;
}

}  // namespace walk_helpers
