// The full-vocabulary mask walk of constrained.grammar.mask.walk, compiled (optional; the Python walk is the
// reference and the fallback). Same algorithm, same order, same work counters: llama.cpp's
// llama_grammar_reject_candidates (src/llama-grammar.cpp) over index arrays of candidate rows, each stack seeing only
// the candidates the previous ones rejected, with the loop shortcut of GrammarRules.loop_exits. The stack machine
// stays in Python: next_stacks, loop_exits, character classes and the per-table row sets are Python callbacks
// (memoised there), so grammar semantics live in one place.
//
// Interface (see constrained/grammar/mask.py: walk_kernel, and _kernel, which builds one Kernel per rules object):
//   Kernel(types: buffer of int32, bottom, token, token_not, visit_cost): one per GrammarRules (its class cache)
//   Kernel.walk(stacks, table, left, loop_min_rows, range_min_rows, range_max_stacks, range_depth, lex, seed,
//               want_pops, want_sure, (next_stacks, loop_exits, klass, value, chain, first_rows, all_in, loop_parts))
//     -> (acc: bytearray over rows, left, rows, visits, looped, pops | None, sure | None)
//   with table = (ids, rem, val, longer, cols, flat, start, length): int64 buffers (cols: tuple of int32 buffers or ()).
//   left < 0 on return means the work budget ran out (the caller raises GrammarLimitError).
#include "_walk.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

struct Ref {  // an owned reference
    PyObject* p = nullptr;
    Ref() = default;
    explicit Ref(PyObject* o) : p(o) {}
    Ref(const Ref&) = delete;
    Ref& operator=(const Ref&) = delete;
    Ref(Ref&& o) noexcept : p(o.p) { o.p = nullptr; }
    Ref& operator=(Ref&& o) noexcept {
        if (this != &o) {
            Py_XDECREF(p);
            p = o.p;
            o.p = nullptr;
        }
        return *this;
    }
    ~Ref() { Py_XDECREF(p); }
};

struct PyFail {};      // a Python exception is set
struct OutOfWork {     // the work budget ran out
    long long left, rows, visits, looped;
};

struct Buf {  // a read-only view of a buffer
    Py_buffer view{};
    bool held = false;
    const void* ptr = nullptr;
    Py_ssize_t len = 0;  // items
    Buf() = default;
    Buf(const Buf&) = delete;
    Buf& operator=(const Buf&) = delete;
    void open(PyObject* o, Py_ssize_t itemsize) {
        if (PyObject_GetBuffer(o, &view, PyBUF_C_CONTIGUOUS) < 0) throw PyFail();
        held = true;
        if (view.itemsize != itemsize && view.len % itemsize != 0) {
            PyErr_SetString(PyExc_TypeError, "walk kernel: unexpected buffer item size");
            throw PyFail();
        }
        ptr = view.buf;
        len = view.len / itemsize;
    }
    ~Buf() {
        if (held) PyBuffer_Release(&view);
    }
};

struct Class {
    bool positive = true;
    std::vector<std::pair<int64_t, int64_t>> items;
};

struct KernelObject {
    PyObject_HEAD
    std::vector<int32_t>* types;
    std::unordered_map<int64_t, Class>* classes;
    int64_t bottom, token, token_not, visit_cost;
};

struct Calls {   // the grammar's and the table's Python callbacks, for one walk
    PyObject* next_stacks;
    PyObject* loop_exits;
    PyObject* klass;
    PyObject* value;
    PyObject* chain;
};

// Everything one walk call needs.
struct Walk {
    KernelObject* k;
    Calls cb;
    const int64_t *ids, *rem, *val, *longer, *flat, *start, *length;
    Py_ssize_t n, n_longer;
    std::vector<const int32_t*> cols;
    std::vector<Py_ssize_t> col_len;
    int64_t left, rows = 0, visits = 0, looped = 0;
    int64_t loop_min_rows;
    int64_t range_min_rows = INT64_MAX, range_depth = 0;
    const int64_t* lex_order = nullptr;        // the table's trie order (TokenTable.build_lex), or null
    std::vector<const int32_t*> lex_cols;      // the code point at each depth in that order (-1 past the end)
    Py_ssize_t lex_len = 0;
    PyObject* first_rows;
    PyObject* all_in;
    PyObject* loop_parts;
    PyObject* pops = nullptr;   // list of (bytearray of int64 rows, depth), or null
    PyObject* sure = nullptr;   // list of clean_bits objects, or null
    std::unordered_map<int64_t, Ref> all_in_cache;   // per class position: the bool over rows
    std::unordered_map<int64_t, Buf*> all_in_bufs;

    ~Walk() {
        for (auto& kv : all_in_bufs) delete kv.second;
    }

    void spend(int64_t c) {
        left -= c;
        if (left < 0) throw OutOfWork{(long long)left, (long long)rows, (long long)visits, (long long)looped};
    }

    int64_t type_of(int64_t p) const { return (*k->types)[(size_t)p]; }

    bool is_token(int64_t ty) const { return ty == k->token || ty == k->token_not; }

    const Class& cls(int64_t p) {
        auto it = k->classes->find(p);
        if (it != k->classes->end()) return it->second;
        Ref r(PyObject_CallFunction(cb.klass, "L", (long long)p));
        if (!r.p) throw PyFail();
        // (positive, ((lo, hi), ...))
        PyObject* pos = PyTuple_GetItem(r.p, 0);
        PyObject* items = PyTuple_GetItem(r.p, 1);
        if (!pos || !items) throw PyFail();
        Class c;
        c.positive = PyObject_IsTrue(pos) == 1;
        Py_ssize_t m = PyTuple_Size(items);
        if (m < 0) throw PyFail();
        for (Py_ssize_t i = 0; i < m; i++) {
            PyObject* it2 = PyTuple_GetItem(items, i);
            long long lo = PyLong_AsLongLong(PyTuple_GetItem(it2, 0));
            long long hi = PyLong_AsLongLong(PyTuple_GetItem(it2, 1));
            if (PyErr_Occurred()) throw PyFail();
            c.items.emplace_back(lo, hi);
        }
        return k->classes->emplace(p, std::move(c)).first->second;
    }

    // llama_grammar_match_char
    static bool match(const Class& c, int64_t cp) {
        for (const auto& it : c.items)
            if (it.first <= cp && cp <= it.second) return c.positive;
        return !c.positive;
    }

    // llama_grammar_match_partial_char (rows with rem <= 0 give false), as charclass._partial_match
    static bool partial(const Class& c, int64_t v, int64_t r) {
        if (r <= 0) return false;
        if (r == 1 && v < 2) return false;
        int64_t low = v << (6 * r);
        int64_t high = low | ((int64_t(1) << (6 * r)) - 1);
        if (low == 0 && r == 2) low = 1 << 11;
        if (low == 0 && r == 3) low = 1 << 16;
        bool hit = false;
        for (const auto& it : c.items)
            if (low <= it.second && high >= it.first) {
                hit = true;
                break;
            }
        return c.positive ? hit : !hit;
    }

    int64_t cp_at(int64_t row, Py_ssize_t d) const {
        if ((size_t)d < cols.size() && row < col_len[(size_t)d]) return cols[(size_t)d][row];
        return flat[start[row] + d];
    }

    Ref next(PyObject* s) {
        Ref r(PyObject_CallOneArg(cb.next_stacks, s));
        if (!r.p) throw PyFail();
        bool ok = PyTuple_Check(r.p);
        for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(r.p); i++) ok = PyTuple_Check(PyTuple_GET_ITEM(r.p, i));
        if (!ok) {
            PyErr_SetString(PyExc_TypeError, "walk kernel: next_stacks must give a tuple of tuples");
            throw PyFail();
        }
        return r;
    }

    // whether a stack after the class top of s loops on the same class (its top's class equal to c, and
    // loop_exits gives its exits): then every row wholly in c is accepted at once (Kernel_walk)
    bool same_class_loop(PyObject* s, const Class& c) {
        Ref nxt = next(s);
        std::vector<int64_t> ex;
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(nxt.p); j++) {
            PyObject* q = PyTuple_GET_ITEM(nxt.p, j);
            Py_ssize_t len = PyTuple_GET_SIZE(q);
            if (!len) continue;
            int64_t top = PyLong_AsLongLong(PyTuple_GET_ITEM(q, len - 1));
            if (top == -1 && PyErr_Occurred()) throw PyFail();
            if (top == k->bottom || is_token(type_of(top))) continue;
            const Class& cq = cls(top);
            if (cq.positive == c.positive && cq.items == c.items && exits_of(q, ex)) return true;
        }
        return false;
    }

    // loop_exits(s) as a vector of class positions; false if None
    bool exits_of(PyObject* s, std::vector<int64_t>& out) {
        Ref r(PyObject_CallOneArg(cb.loop_exits, s));
        if (!r.p) throw PyFail();
        if (r.p == Py_None) return false;
        Py_ssize_t m = PyTuple_Size(r.p);
        if (m < 0) throw PyFail();
        out.clear();
        for (Py_ssize_t i = 0; i < m; i++) {
            long long q = PyLong_AsLongLong(PyTuple_GetItem(r.p, i));
            if (PyErr_Occurred()) throw PyFail();
            out.push_back(q);
        }
        return true;
    }

    // GrammarRules.chain(s): the class tops at each link and whether the chain ends; false if None
    bool chain_of(PyObject* s, std::vector<std::vector<int64_t>>& levels, bool& ended) {
        Ref r(PyObject_CallOneArg(cb.chain, s));
        if (!r.p) throw PyFail();
        if (r.p == Py_None) return false;
        PyObject* lv = PyTuple_GetItem(r.p, 0);
        PyObject* en = PyTuple_GetItem(r.p, 1);
        if (!lv || !en) throw PyFail();
        Py_ssize_t m = PyTuple_Size(lv);
        if (m < 0) throw PyFail();
        levels.assign((size_t)m, {});
        for (Py_ssize_t j = 0; j < m; j++) {
            PyObject* tops = PyTuple_GetItem(lv, j);
            if (!tops) throw PyFail();
            for (Py_ssize_t i = 0; i < PyTuple_Size(tops); i++) {
                long long q = PyLong_AsLongLong(PyTuple_GetItem(tops, i));
                if (PyErr_Occurred()) throw PyFail();
                levels[(size_t)j].push_back(q);
            }
        }
        ended = PyObject_IsTrue(en) == 1;
        return true;
    }

    // charclass._chain_end_ok for one row with `left` code points to go
    bool chain_end_ok(const std::vector<std::vector<int64_t>>& levels, int64_t e, int64_t left) {
        if (left > (int64_t)levels.size() || left < 1) return false;
        int64_t r = rem[e];
        if (r == 0) return true;
        if (r < 0) return false;
        for (int64_t q : levels[(size_t)(left - 1)])
            if (partial(cls(q), val[e], r)) return true;
        return false;
    }

    const uint8_t* inside_of(int64_t top) {
        auto it = all_in_bufs.find(top);
        if (it != all_in_bufs.end()) return (const uint8_t*)it->second->ptr;
        Ref r(PyObject_CallFunction(all_in, "L", (long long)top));
        if (!r.p) throw PyFail();
        Buf* b = new Buf();
        try {
            b->open(r.p, 1);
        } catch (...) {
            delete b;
            throw;
        }
        all_in_bufs[top] = b;
        all_in_cache.emplace(top, std::move(r));
        return (const uint8_t*)b->ptr;
    }

    // charclass._loop_end_ok for one row
    bool loop_end_ok(const Class& ct, const std::vector<int64_t>& exits, int64_t e) {
        int64_t r = rem[e];
        if (r == 0) return true;
        if (r < 0) return false;
        if (partial(ct, val[e], r)) return true;
        for (int64_t q : exits)
            if (partial(cls(q), val[e], r)) return true;
        return false;
    }

    void add_pop(const std::vector<int64_t>& rws, int64_t depth) {
        Ref b(PyByteArray_FromStringAndSize(nullptr, (Py_ssize_t)(rws.size() * sizeof(int64_t))));
        if (!b.p) throw PyFail();
        if (!rws.empty()) std::memcpy(PyByteArray_AS_STRING(b.p), rws.data(), rws.size() * sizeof(int64_t));
        Ref item(Py_BuildValue("(OL)", b.p, (long long)depth));
        if (!item.p || PyList_Append(pops, item.p) < 0) throw PyFail();
    }

    // walk_python._acc_stacks: llama_grammar_reject_candidates at depth d, as a bool over rows (1 = accepted)
    void acc_stacks(PyObject* stacks, const std::vector<int64_t>& rws, Py_ssize_t d, std::vector<uint8_t>& out) {
        Py_ssize_t ns = PyTuple_GET_SIZE(stacks);
        out.assign(rws.size(), 0);
        if (ns == 0) return;
        std::vector<uint8_t> a;
        acc_stack(PyTuple_GET_ITEM(stacks, 0), rws, d, a);
        out.swap(a);
        if (ns == 1) return;
        std::vector<int64_t> idx, cur;
        for (size_t i = 0; i < rws.size(); i++)
            if (!out[i]) {
                idx.push_back((int64_t)i);
                cur.push_back(rws[i]);
            }
        for (Py_ssize_t j = 1; j < ns && !cur.empty(); j++) {
            acc_stack(PyTuple_GET_ITEM(stacks, j), cur, d, a);
            size_t w = 0;
            for (size_t i = 0; i < cur.size(); i++) {
                if (a[i]) {
                    out[(size_t)idx[i]] = 1;
                } else {
                    idx[w] = idx[i];
                    cur[w] = cur[i];
                    w++;
                }
            }
            idx.resize(w);
            cur.resize(w);
        }
    }

    // walk_python._acc_stack: llama_grammar_reject_candidates_for_stack at depth d (rows ascending)
    void acc_stack(PyObject* s, const std::vector<int64_t>& rws, Py_ssize_t d, std::vector<uint8_t>& a) {
        Py_ssize_t m = (Py_ssize_t)rws.size();
        spend(m + k->visit_cost);
        rows += m;
        visits += 1;
        Py_ssize_t kk = m;
        if (d < n_longer) {   // searchsorted(rows, longer[d]): rows past it have no code point at depth d
            int64_t lim = longer[d];
            Py_ssize_t lo = 0, hi = m;
            while (lo < hi) {
                Py_ssize_t mid = (lo + hi) / 2;
                if (rws[(size_t)mid] < lim) lo = mid + 1;
                else hi = mid;
            }
            kk = lo;
        }
        a.assign((size_t)m, 0);
        Py_ssize_t len = PyTuple_GET_SIZE(s);
        int64_t top = len ? PyLong_AsLongLong(PyTuple_GET_ITEM(s, len - 1)) : -1;
        if (top == -1 && PyErr_Occurred()) throw PyFail();
        int64_t ty = len ? type_of(top) : -1;
        bool class_top = len && top != k->bottom && !is_token(ty);
        if (kk < m) {   // candidates with no code points left
            if (class_top) {
                const Class& c = cls(top);
                for (Py_ssize_t i = kk; i < m; i++) {
                    int64_t e = rws[(size_t)i];
                    a[(size_t)i] = rem[e] == 0 || partial(c, val[e], rem[e]);
                }
            } else {
                for (Py_ssize_t i = kk; i < m; i++) a[(size_t)i] = rem[rws[(size_t)i]] == 0;
            }
        }
        if (!len || kk == 0) return;
        if (top == k->bottom) {
            if (pops) {
                std::vector<int64_t> r;
                for (Py_ssize_t i = 0; i < m; i++)
                    if (!a[(size_t)i]) r.push_back(rws[(size_t)i]);
                add_pop(r, d);
            }
            return;
        }
        if (is_token(ty)) {
            int64_t want = token_value(top);
            bool pos = ty == k->token;
            for (Py_ssize_t i = 0; i < kk; i++) a[(size_t)i] = (ids[rws[(size_t)i]] == want) == pos;
            return;
        }
        const Class& c = cls(top);
        std::vector<int64_t> hit;   // indices into rws
        std::vector<int64_t> ex;
        std::vector<std::vector<int64_t>> levels;
        bool ended = false;
        if (kk >= loop_min_rows && exits_of(s, ex)) {   // rows wholly in the loop's class: decided at their end
            const uint8_t* inside = inside_of(top);
            for (Py_ssize_t i = 0; i < kk; i++) {
                int64_t r = rws[(size_t)i];
                if (inside[r]) {
                    a[(size_t)i] = loop_end_ok(c, ex, r);
                    looped += 1;
                } else if (match(c, cp_at(r, d))) {
                    hit.push_back(i);
                }
            }
        } else {
            for (Py_ssize_t i = 0; i < kk; i++)
                if (match(c, cp_at(rws[(size_t)i], d))) hit.push_back(i);
            if (kk >= loop_min_rows && (int64_t)hit.size() >= loop_min_rows && chain_of(s, levels, ended)) {
                // rows wholly in a bounded repetition's class: decided by their length (GrammarRules.chain)
                const uint8_t* inside = inside_of(top);
                const int64_t nl = (int64_t)levels.size();
                size_t wr = 0;
                for (size_t j = 0; j < hit.size(); j++) {
                    int64_t i = hit[j];
                    int64_t r = rws[(size_t)i];
                    int64_t left = length[r] - d;
                    if (inside[r] && (left <= nl || ended)) {
                        a[(size_t)i] = chain_end_ok(levels, r, left);
                        looped += 1;
                    } else {
                        hit[wr++] = i;
                    }
                }
                hit.resize(wr);
            }
        }
        if (!hit.empty()) {
            std::vector<int64_t> sub_rows(hit.size());
            for (size_t j = 0; j < hit.size(); j++) sub_rows[j] = rws[(size_t)hit[j]];
            Ref nxt = next(s);
            std::vector<uint8_t> sub;
            acc_stacks(nxt.p, sub_rows, d + 1, sub);
            for (size_t j = 0; j < hit.size(); j++)
                if (sub[j]) a[(size_t)hit[j]] = 1;
        }
    }

    int64_t token_value(int64_t top);

    // walk_python._rows_walk
    void rows_walk(PyObject* s, const int64_t* rws, size_t m, Py_ssize_t d, uint8_t* acc) {
        std::vector<int64_t> cur;
        cur.reserve(m);
        for (size_t i = 0; i < m; i++)
            if (!acc[rws[i]]) cur.push_back(rws[i]);
        if (cur.empty()) return;
        std::vector<uint8_t> a;
        acc_stack(s, cur, d, a);
        for (size_t i = 0; i < cur.size(); i++)
            if (a[i]) acc[cur[i]] = 1;
    }

    // the rows of slice a:b of the trie order, ascending: a comparison sort for short slices, else the rows marked
    // in a bitmap over the table and read back in order (linear; the space-led slices of a large vocabulary hold
    // thousands of rows)
    std::vector<int64_t> sorted_slice(Py_ssize_t a, Py_ssize_t b) const {
        std::vector<int64_t> r(lex_order + a, lex_order + b);
        if (r.size() < 256) {
            std::sort(r.begin(), r.end());
            return r;
        }
        int64_t lo = *std::min_element(r.begin(), r.end()), hi = *std::max_element(r.begin(), r.end());
        const int64_t w0 = lo >> 6, nw = (hi >> 6) - w0 + 1;
        std::vector<uint64_t> bits((size_t)nw, 0);
        for (int64_t x : r) bits[(size_t)((x >> 6) - w0)] |= 1ULL << (x & 63);
        size_t o = 0;
        for (int64_t i = 0; i < nw; i++)
            for (uint64_t word = bits[(size_t)i]; word; word &= word - 1)
                r[o++] = ((w0 + i) << 6) + __builtin_ctzll(word);
        return r;
    }

    // walk_python._acc_range: the rows sharing one prefix of d code points, slice a:b of the trie order
    // (asc: the same rows ascending, b - a of them, where the caller has them, else null)
    void acc_range(PyObject* s, Py_ssize_t a, Py_ssize_t b, Py_ssize_t d, const int64_t* asc,
                   uint8_t* acc) {
        spend(k->visit_cost);
        visits += 1;
        Py_ssize_t len = PyTuple_GET_SIZE(s);
        int64_t top = len ? PyLong_AsLongLong(PyTuple_GET_ITEM(s, len - 1)) : -1;
        if (top == -1 && PyErr_Occurred()) throw PyFail();
        std::vector<int64_t> ex;
        if (d >= (Py_ssize_t)lex_cols.size() || b - a < range_min_rows || !len || top == k->bottom ||
            is_token(type_of(top)) || exits_of(s, ex)) {
            if (asc) {
                rows_walk(s, asc, (size_t)(b - a), d, acc);
            } else {
                std::vector<int64_t> r = sorted_slice(a, b);
                rows_walk(s, r.data(), r.size(), d, acc);
            }
            return;
        }
        const int32_t* col = lex_cols[(size_t)d];
        Py_ssize_t e = std::lower_bound(col + a, col + b, 0) - (col + a);   // the rows that end here come first
        const int32_t* c = col + a + e;
        Py_ssize_t nc = b - a - e;
        const Class& cl = cls(top);
        std::vector<std::pair<Py_ssize_t, Py_ssize_t>> spans;
        for (const auto& it : cl.items) {
            // searchsorted(c, lo, "left"), searchsorted(c, hi, "right") with int64 bounds over int32 values
            Py_ssize_t i0 = std::lower_bound(c, c + nc, it.first, [](int32_t x, int64_t v) { return x < v; }) - c;
            Py_ssize_t i1 = std::upper_bound(c, c + nc, it.second, [](int64_t v, int32_t x) { return v < x; }) - c;
            spans.emplace_back(i0, i1);
        }
        std::sort(spans.begin(), spans.end());
        if (!cl.positive) {
            std::vector<std::pair<Py_ssize_t, Py_ssize_t>> out;
            Py_ssize_t at = 0;
            for (const auto& sp : spans) {
                if (sp.first > at) out.emplace_back(at, sp.first);
                at = std::max(at, sp.second);
            }
            if (at < nc) out.emplace_back(at, nc);
            spans.swap(out);
        }
        if (asc) {
            Py_ssize_t multi = 0;
            for (const auto& sp : spans)
                if (sp.second > sp.first && c[sp.first] != c[sp.second - 1]) multi += sp.second - sp.first;
            if (multi * 4 > nc) {   // mostly wide spans: a class test over the rows
                rows_walk(s, asc, (size_t)(b - a), d, acc);
                return;
            }
        }
        rows += e;   // the slice itself costs binary searches, not row steps
        for (Py_ssize_t i = 0; i < e; i++) {
            int64_t er = lex_order[a + i];
            if (!acc[er] && (rem[er] == 0 || partial(cl, val[er], rem[er]))) acc[er] = 1;
        }
        Ref nxt = next(s);
        Py_ssize_t nn = PyTuple_GET_SIZE(nxt.p);
        for (const auto& sp : spans) {
            Py_ssize_t i0 = sp.first, i1 = sp.second;
            if (i1 <= i0) continue;
            if (c[i0] == c[i1 - 1] && d + 1 < range_depth) {   // one code point: one slice again, one deeper
                for (Py_ssize_t j = 0; j < nn; j++)
                    acc_range(PyTuple_GET_ITEM(nxt.p, j), a + e + i0, a + e + i1, d + 1, nullptr, acc);
            } else {
                std::vector<int64_t> r0 = sorted_slice(a + e + i0, a + e + i1), r1;
                r1.reserve(r0.size());
                for (int64_t r : r0)
                    if (!acc[r]) r1.push_back(r);
                if (!r1.empty()) {
                    spend((int64_t)r1.size());
                    std::vector<uint8_t> sub;
                    acc_stacks(nxt.p, r1, d + 1, sub);
                    for (size_t j = 0; j < r1.size(); j++)
                        if (sub[j]) acc[r1[j]] = 1;
                }
            }
        }
    }
};

int64_t Walk::token_value(int64_t top) {
    // the token id of a TOKEN / TOKEN_NOT element (rare: one callback)
    Ref r(PyObject_CallFunction(cb.value, "L", (long long)top));
    if (!r.p) throw PyFail();
    long long v = PyLong_AsLongLong(r.p);
    if (v == -1 && PyErr_Occurred()) throw PyFail();
    return v;
}

void Kernel_dealloc(KernelObject* self) {
    delete self->types;
    delete self->classes;
    Py_TYPE(self)->tp_free((PyObject*)self);
}

int Kernel_init(KernelObject* self, PyObject* args, PyObject*) {
    PyObject* types;
    long long bottom, token, token_not, visit_cost;
    if (!PyArg_ParseTuple(args, "OLLLL", &types, &bottom, &token, &token_not, &visit_cost))
        return -1;
    Py_buffer v;
    if (PyObject_GetBuffer(types, &v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    if (v.itemsize != 4) {
        PyBuffer_Release(&v);
        PyErr_SetString(PyExc_TypeError, "Kernel: types must be a buffer of int32");
        return -1;
    }
    delete self->types;
    delete self->classes;
    self->types = new std::vector<int32_t>((const int32_t*)v.buf, (const int32_t*)v.buf + v.len / 4);
    self->classes = new std::unordered_map<int64_t, Class>();
    PyBuffer_Release(&v);
    self->bottom = bottom;
    self->token = token;
    self->token_not = token_not;
    self->visit_cost = visit_cost;
    return 0;
}

PyObject* Kernel_new(PyTypeObject* type, PyObject*, PyObject*) {
    KernelObject* self = (KernelObject*)type->tp_alloc(type, 0);
    if (self) {
        self->types = nullptr;
        self->classes = nullptr;
    }
    return (PyObject*)self;
}

// acc[i] |= src[i] for rows from..n, eight rows a word (the byte loop is not vectorised: the two may alias)
void or_rows(uint8_t* acc, const uint8_t* src, Py_ssize_t from, Py_ssize_t n) {
    Py_ssize_t i = from;
    for (; i + 8 <= n; i += 8) {
        uint64_t a, b;
        std::memcpy(&a, acc + i, 8);
        std::memcpy(&b, src + i, 8);
        a |= b;
        std::memcpy(acc + i, &a, 8);
    }
    for (; i < n; i++) acc[i] |= src[i];
}

// charclass._first_count: the rows whose first code point class c matches, from cp0 (the first code point of each row
// that has one, ascending) by binary searches
Py_ssize_t first_count(const Class& c, const int64_t* cp0, Py_ssize_t m) {
    std::vector<std::pair<Py_ssize_t, Py_ssize_t>> spans;
    for (const auto& it : c.items)
        spans.emplace_back(std::lower_bound(cp0, cp0 + m, it.first) - cp0, std::upper_bound(cp0, cp0 + m, it.second) - cp0);
    std::sort(spans.begin(), spans.end());
    Py_ssize_t n = 0, at = 0;
    for (const auto& sp : spans)
        if (sp.second > at) {
            n += sp.second - std::max(sp.first, at);
            at = sp.second;
        }
    return c.positive ? n : m - n;
}

PyObject* Kernel_walk(KernelObject* self, PyObject* args) {
    PyObject *stacks, *table, *seed, *lex;
    Calls cb;
    PyObject *first_rows, *all_in, *loop_parts;
    long long left, loop_min_rows, range_min_rows, range_max_stacks, range_depth;
    int want_pops, want_sure;
    if (!PyArg_ParseTuple(args, "O!O!LLLLLOOpp(OOOOOOOO)", &PyTuple_Type, &stacks, &PyTuple_Type, &table, &left,
                          &loop_min_rows, &range_min_rows, &range_max_stacks, &range_depth, &lex, &seed,
                          &want_pops, &want_sure, &cb.next_stacks, &cb.loop_exits, &cb.klass, &cb.value,
                          &cb.chain, &first_rows, &all_in, &loop_parts))
        return nullptr;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(stacks); i++)
        if (!PyTuple_Check(PyTuple_GET_ITEM(stacks, i))) {
            PyErr_SetString(PyExc_TypeError, "walk: every stack must be a tuple");
            return nullptr;
        }
    if (!self->types) {
        PyErr_SetString(PyExc_RuntimeError, "Kernel not initialised");
        return nullptr;
    }
    if (PyTuple_GET_SIZE(table) != 8) {
        PyErr_SetString(PyExc_TypeError, "walk: table must be (ids, rem, val, longer, cols, flat, start, length)");
        return nullptr;
    }
    Ref pops, sure, out;
    try {
        Buf b_ids, b_rem, b_val, b_longer, b_flat, b_start, b_seed;
        b_ids.open(PyTuple_GET_ITEM(table, 0), 8);
        b_rem.open(PyTuple_GET_ITEM(table, 1), 8);
        b_val.open(PyTuple_GET_ITEM(table, 2), 8);
        b_longer.open(PyTuple_GET_ITEM(table, 3), 8);
        b_flat.open(PyTuple_GET_ITEM(table, 5), 8);
        b_start.open(PyTuple_GET_ITEM(table, 6), 8);
        Buf b_length;
        b_length.open(PyTuple_GET_ITEM(table, 7), 8);
        PyObject* colt = PyTuple_GET_ITEM(table, 4);
        if (!PyTuple_Check(colt)) {
            PyErr_SetString(PyExc_TypeError, "walk: cols must be a tuple");
            return nullptr;
        }
        Py_ssize_t ncol = PyTuple_GET_SIZE(colt);
        std::vector<Buf> colbufs((size_t)ncol);
        Walk w;
        w.k = self;
        w.cb = cb;
        w.ids = (const int64_t*)b_ids.ptr;
        w.rem = (const int64_t*)b_rem.ptr;
        w.val = (const int64_t*)b_val.ptr;
        w.longer = (const int64_t*)b_longer.ptr;
        w.flat = (const int64_t*)b_flat.ptr;
        w.start = (const int64_t*)b_start.ptr;
        w.length = (const int64_t*)b_length.ptr;
        w.n = b_ids.len;
        w.n_longer = b_longer.len;
        if (b_rem.len != w.n || b_val.len != w.n || b_start.len != w.n || b_length.len != w.n) {
            PyErr_SetString(PyExc_ValueError, "walk: the table's columns differ in length");
            return nullptr;
        }
        for (Py_ssize_t d = 0; d < ncol; d++) {
            colbufs[(size_t)d].open(PyTuple_GET_ITEM(colt, d), 4);
            w.cols.push_back((const int32_t*)colbufs[(size_t)d].ptr);
            w.col_len.push_back(colbufs[(size_t)d].len);
        }
        w.left = left;
        w.loop_min_rows = loop_min_rows;
        // the trie ranges: lex = (order, cols, cp0, order0) or None
        Buf b_order, b_cp0, b_order0;
        std::vector<Buf> lexbufs;
        bool ranges = false;
        if (lex != Py_None) {
            if (!PyTuple_Check(lex) || PyTuple_GET_SIZE(lex) != 4 || !PyTuple_Check(PyTuple_GET_ITEM(lex, 1))) {
                PyErr_SetString(PyExc_TypeError, "walk: lex must be (order, cols, cp0, order0)");
                return nullptr;
            }
            b_order.open(PyTuple_GET_ITEM(lex, 0), 8);
            b_cp0.open(PyTuple_GET_ITEM(lex, 2), 8);
            b_order0.open(PyTuple_GET_ITEM(lex, 3), 8);
            PyObject* lc = PyTuple_GET_ITEM(lex, 1);
            lexbufs = std::vector<Buf>((size_t)PyTuple_GET_SIZE(lc));
            for (Py_ssize_t d = 0; d < PyTuple_GET_SIZE(lc); d++) {
                lexbufs[(size_t)d].open(PyTuple_GET_ITEM(lc, d), 4);
                w.lex_cols.push_back((const int32_t*)lexbufs[(size_t)d].ptr);
            }
            w.lex_order = (const int64_t*)b_order.ptr;
            w.lex_len = b_order.len;
            w.range_min_rows = range_min_rows;
            w.range_depth = range_depth;
            ranges = w.n >= range_min_rows && PyTuple_GET_SIZE(stacks) <= range_max_stacks && !w.lex_cols.empty();
        }
        w.first_rows = first_rows;
        w.all_in = all_in;
        w.loop_parts = loop_parts;
        if (want_pops) {
            pops = Ref(PyList_New(0));
            if (!pops.p) return nullptr;
            w.pops = pops.p;
        }
        if (want_sure) {
            sure = Ref(PyList_New(0));
            if (!sure.p) return nullptr;
            w.sure = sure.p;
        }
        const Py_ssize_t n = w.n;
        out = Ref(PyByteArray_FromStringAndSize(nullptr, n));
        if (!out.p) return nullptr;
        uint8_t* acc = (uint8_t*)PyByteArray_AS_STRING(out.p);
        if (seed != Py_None) {
            b_seed.open(seed, 1);
            if (b_seed.len != n) {
                PyErr_SetString(PyExc_ValueError, "walk: seed must cover the table's rows");
                return nullptr;
            }
            const uint8_t* sp = (const uint8_t*)b_seed.ptr;
            for (Py_ssize_t i = 0; i < n; i++) acc[i] = sp[i] != 0;
        } else {
            std::memset(acc, 0, (size_t)n);
        }
        const Py_ssize_t k0 = w.n_longer ? (Py_ssize_t)w.longer[0] : 0;
        const int64_t* rem = w.rem;
        Py_ssize_t ns = PyTuple_GET_SIZE(stacks);
        std::vector<int64_t> ex;
        for (Py_ssize_t si = 0; si < ns; si++) {
            PyObject* s = PyTuple_GET_ITEM(stacks, si);
            w.spend(self->visit_cost);
            Py_ssize_t len = PyTuple_GET_SIZE(s);
            if (!len) {
                for (Py_ssize_t r = k0; r < n; r++) acc[r] |= rem[r] == 0;
                continue;
            }
            int64_t top = PyLong_AsLongLong(PyTuple_GET_ITEM(s, len - 1));
            if (top == -1 && PyErr_Occurred()) throw PyFail();
            int64_t ty = w.type_of(top);
            if (top == self->bottom) {
                for (Py_ssize_t r = k0; r < n; r++) acc[r] |= rem[r] == 0;
                if (w.pops) {
                    std::vector<int64_t> r;
                    for (Py_ssize_t i = 0; i < n; i++)
                        if (!acc[i]) r.push_back(i);
                    w.add_pop(r, 0);
                }
                continue;
            }
            if (w.is_token(ty)) {
                for (Py_ssize_t r = k0; r < n; r++) acc[r] |= rem[r] == 0;
                int64_t want = w.token_value(top);
                bool pos = ty == self->token;
                for (Py_ssize_t r = 0; r < k0; r++) acc[r] |= (w.ids[r] == want) == pos;
                w.spend(n);
                w.rows += n;
                w.visits += 1;
                continue;
            }
            const Class& c = w.cls(top);
            for (Py_ssize_t r = k0; r < n; r++) acc[r] |= rem[r] == 0 || Walk::partial(c, w.val[r], rem[r]);
            Ref matched_obj;
            bool looping = k0 >= loop_min_rows && w.exits_of(s, ex);
            std::vector<std::vector<int64_t>> levels;
            bool ended = false;
            Ref first;
            Py_ssize_t n_first = -1;   // how many rows the class's first code point starts (-1: not needed)
            if (!looping && k0 >= loop_min_rows) {
                if (b_cp0.ptr) {   // counted by binary searches over the sorted first code points (charclass._first_count)
                    n_first = first_count(c, (const int64_t*)b_cp0.ptr, b_cp0.len);
                } else {
                    first = Ref(PyObject_CallFunction(first_rows, "L", (long long)top));
                    if (!first.p) throw PyFail();
                }
            }
            Buf bf;
            if (first.p) {
                bf.open(first.p, 8);
                n_first = bf.len;
            }
            std::vector<int64_t> cps;   // walk_python._single_cps: a positive class of at most 8 single code points
            if (!looping && ranges && c.positive && c.items.size() <= 8) {
                for (const auto& it : c.items) {
                    if (it.first != it.second) {
                        cps.clear();
                        break;
                    }
                    cps.push_back(it.first);
                }
                std::sort(cps.begin(), cps.end());
                cps.erase(std::unique(cps.begin(), cps.end()), cps.end());
            }
            // a few single code points go to the trie ranges even where they make a chain (a space after a space):
            // the chain shortcut decides the rows wholly in the class, here few, and walks the rest row by row
            if (cps.empty() && n_first >= loop_min_rows && w.chain_of(s, levels, ended)) {
                // rows wholly in a bounded repetition's class: decided by their length (GrammarRules.chain), from
                // the loop shortcut's cached parts of the class; rows from lim on have at most len(levels) code
                // points (rows are sorted by length)
                Ref parts(PyObject_CallFunction(loop_parts, "L", (long long)top));
                if (!parts.p) throw PyFail();
                PyObject* clean = PyTuple_GetItem(parts.p, 0);
                PyObject* clean_bits = PyTuple_GetItem(parts.p, 1);
                PyObject* pending = PyTuple_GetItem(parts.p, 2);
                PyObject* rest = PyTuple_GetItem(parts.p, 3);
                if (!clean || !clean_bits || !pending || !rest) throw PyFail();
                const int64_t nl = (int64_t)levels.size();
                const Py_ssize_t lim = nl < w.n_longer ? (Py_ssize_t)w.longer[nl] : 0;
                if (lim == 0 && w.sure && clean_bits != Py_None && PyList_Append(w.sure, clean_bits) < 0)
                    throw PyFail();
                Buf bc, bp, br;
                bc.open(clean, 1);
                bp.open(pending, 8);
                br.open(rest, 8);
                const uint8_t* cl = (const uint8_t*)bc.ptr;
                or_rows(acc, cl, lim, n);
                const int64_t* pe = (const int64_t*)bp.ptr;
                for (Py_ssize_t i = 0; i < bp.len; i++) {
                    int64_t e = pe[i];
                    if (e >= lim && !acc[e] && w.chain_end_ok(levels, e, w.length[e])) acc[e] = 1;
                }
                const int64_t* rp = (const int64_t*)br.ptr;
                std::vector<int64_t> matched;
                if (ended || lim == 0) {
                    matched.assign(rp, rp + br.len);
                } else {   // rest and the rows wholly in the class longer than the chain (walked), ascending
                    const uint8_t* inside = w.inside_of(top);
                    std::vector<int64_t> longer_in;
                    for (Py_ssize_t r = 0; r < lim; r++)
                        if (inside[r]) longer_in.push_back(r);
                    matched.resize((size_t)br.len + longer_in.size());
                    auto it = std::set_union(rp, rp + br.len, longer_in.begin(), longer_in.end(), matched.begin());
                    matched.resize((size_t)(it - matched.begin()));
                }
                w.looped += k0 - (int64_t)matched.size();
                w.spend(n / 64);
                size_t wr = 0;
                for (size_t j = 0; j < matched.size(); j++)
                    if (!acc[matched[j]]) matched[wr++] = matched[j];
                matched.resize(wr);
                w.rows += (int64_t)matched.size() + (n - k0);
                w.visits += 1;
                if (!matched.empty()) {
                    Ref nxt = w.next(s);
                    std::vector<uint8_t> sub;
                    w.acc_stacks(nxt.p, matched, 1, sub);
                    for (size_t j = 0; j < matched.size(); j++)
                        if (sub[j]) acc[matched[j]] = 1;
                }
                continue;
            }
            if (looping) {   // rows wholly in the loop's class: decided at their end (loop_exits)
                Ref parts(PyObject_CallFunction(loop_parts, "L", (long long)top));
                if (!parts.p) throw PyFail();
                // (clean, clean_bits, pending, rest)
                PyObject* clean = PyTuple_GetItem(parts.p, 0);
                PyObject* clean_bits = PyTuple_GetItem(parts.p, 1);
                PyObject* pending = PyTuple_GetItem(parts.p, 2);
                PyObject* rest = PyTuple_GetItem(parts.p, 3);
                if (!clean || !clean_bits || !pending || !rest) throw PyFail();
                if (w.sure && clean_bits != Py_None && PyList_Append(w.sure, clean_bits) < 0) throw PyFail();
                Buf bc, bp;
                bc.open(clean, 1);
                bp.open(pending, 8);
                const uint8_t* cl = (const uint8_t*)bc.ptr;
                or_rows(acc, cl, 0, n);
                const int64_t* pe = (const int64_t*)bp.ptr;
                for (Py_ssize_t i = 0; i < bp.len; i++) {
                    int64_t e = pe[i];
                    if (!acc[e] && w.loop_end_ok(c, ex, e)) acc[e] = 1;
                }
                matched_obj = Ref(Py_NewRef(rest));
                w.spend(n / 64);
            } else {
                if (!cps.empty()) {   // the first code point's rows, as trie ranges
                    w.rows += n - k0;
                    w.visits += 1;
                    Ref nxt = w.next(s);
                    const int32_t* col0 = w.lex_cols[0];
                    const int64_t* cp0 = (const int64_t*)b_cp0.ptr;
                    const int64_t* order0 = (const int64_t*)b_order0.ptr;
                    Py_ssize_t nl = w.lex_len;
                    for (int64_t cpv : cps) {
                        Py_ssize_t a = std::lower_bound(col0, col0 + nl, cpv, [](int32_t x, int64_t v) { return x < v; }) - col0;
                        Py_ssize_t b = std::upper_bound(col0, col0 + nl, cpv, [](int64_t v, int32_t x) { return v < x; }) - col0;
                        if (b > a) {
                            Py_ssize_t i = std::lower_bound(cp0, cp0 + b_cp0.len, cpv) - cp0;
                            for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(nxt.p); j++)
                                w.acc_range(PyTuple_GET_ITEM(nxt.p, j), a, b, 1, order0 + i, acc);   // ascending
                        }
                    }
                    continue;
                }
                if (k0 >= loop_min_rows && w.same_class_loop(s, c)) {
                    // a class followed by a loop on the same class (x x*, as [a-z]+): a row wholly in the class
                    // with no pending sequence is accepted by the loop whatever its exits, as in the looping path
                    // above; the other rows of the class's first code point are walked below
                    Ref parts(PyObject_CallFunction(loop_parts, "L", (long long)top));
                    if (!parts.p) throw PyFail();
                    PyObject* clean = PyTuple_GetItem(parts.p, 0);
                    PyObject* clean_bits = PyTuple_GetItem(parts.p, 1);
                    if (!clean || !clean_bits) throw PyFail();
                    if (w.sure && clean_bits != Py_None && PyList_Append(w.sure, clean_bits) < 0) throw PyFail();
                    Buf bc;
                    bc.open(clean, 1);
                    const uint8_t* cl = (const uint8_t*)bc.ptr;
                    or_rows(acc, cl, 0, n);
                    w.spend(n / 64);
                }
                if (first.p) {
                    matched_obj = Ref(Py_NewRef(first.p));
                } else {
                    matched_obj = Ref(PyObject_CallFunction(first_rows, "L", (long long)top));
                    if (!matched_obj.p) throw PyFail();
                }
            }
            Buf bm;
            bm.open(matched_obj.p, 8);
            const int64_t* mp = (const int64_t*)bm.ptr;
            std::vector<int64_t> matched;
            matched.reserve((size_t)bm.len);
            for (Py_ssize_t i = 0; i < bm.len; i++)
                if (!acc[mp[i]]) matched.push_back(mp[i]);
            if (looping) w.looped += k0 - bm.len;
            w.rows += (int64_t)matched.size() + (n - k0);
            w.visits += 1;
            if (!matched.empty()) {
                Ref nxt = w.next(s);
                std::vector<uint8_t> sub;
                w.acc_stacks(nxt.p, matched, 1, sub);
                for (size_t j = 0; j < matched.size(); j++)
                    if (sub[j]) acc[matched[j]] = 1;
            }
        }
        return Py_BuildValue("(OLLLLOO)", out.p, (long long)w.left, (long long)w.rows, (long long)w.visits,
                             (long long)w.looped, pops.p ? pops.p : Py_None, sure.p ? sure.p : Py_None);
    } catch (PyFail&) {
        return nullptr;
    } catch (OutOfWork& e) {
        return Py_BuildValue("(OLLLLOO)", Py_None, e.left, e.rows, e.visits, e.looped, Py_None, Py_None);
    } catch (std::bad_alloc&) {
        return PyErr_NoMemory();
    }
}

// np.packbits(by_id(t, acc)) for a table holding every id once: bit ids[r] (most significant bit first) for each
// accepted row r
PyObject* pack_ids(PyObject*, PyObject* args) {
    PyObject *acc_o, *ids_o, *inv_o = Py_None;
    Py_ssize_t nbits;
    if (!PyArg_ParseTuple(args, "OOn|O", &acc_o, &ids_o, &nbits, &inv_o)) return nullptr;
    try {
        Buf acc, ids, inv;
        acc.open(acc_o, 1);
        ids.open(ids_o, 8);
        if (acc.len != ids.len) {
            PyErr_SetString(PyExc_ValueError, "pack_ids: acc and ids differ in length");
            return nullptr;
        }
        Ref out(PyByteArray_FromStringAndSize(nullptr, (nbits + 7) / 8));
        if (!out.p) return nullptr;
        uint8_t* bits = (uint8_t*)PyByteArray_AS_STRING(out.p);
        std::memset(bits, 0, (size_t)((nbits + 7) / 8));
        const uint8_t* a = (const uint8_t*)acc.ptr;
        const int64_t* id = (const int64_t*)ids.ptr;
        if (inv_o != Py_None) {   // inv[id] = row for every id: a gather when many rows are accepted
            inv.open(inv_o, 8);
            if (inv.len != nbits || acc.len != nbits) {
                PyErr_SetString(PyExc_ValueError, "pack_ids: inv must map every id to a row");
                return nullptr;
            }
            if (walk_helpers::count_rows(a, acc.len) * 64 > nbits) {   // dense: scattered to id order as bytes, then packed in order
                std::vector<uint8_t> by(((size_t)nbits + 7) & ~(size_t)7, 0);
                for (Py_ssize_t r = 0; r < acc.len; r++) {
                    int64_t i = id[r];
                    if ((uint64_t)i >= (uint64_t)nbits) {
                        PyErr_SetString(PyExc_ValueError, "pack_ids: id out of range");
                        return nullptr;
                    }
                    by[(size_t)i] = a[r] != 0;
                }
                for (size_t j = 0; j < by.size() / 8; j++) {
                    const uint8_t* q = by.data() + 8 * j;
                    bits[j] = (uint8_t)(q[0] << 7 | q[1] << 6 | q[2] << 5 | q[3] << 4 | q[4] << 3 | q[5] << 2 |
                                        q[6] << 1 | q[7]);
                }
                PyObject* o = out.p;
                out.p = nullptr;
                return o;
            }
        }
        const bool ok = walk_helpers::for_each_row(a, acc.len, true, [&](Py_ssize_t r) {
            int64_t i = id[r];
            if (i < 0 || i >= nbits) {
                PyErr_SetString(PyExc_ValueError, "pack_ids: id out of range");
                return false;
            }
            bits[i >> 3] |= (uint8_t)(0x80 >> (i & 7));
            return true;
        });
        if (!ok) return nullptr;
        PyObject* o = out.p;
        out.p = nullptr;
        return o;
    } catch (PyFail&) {
        return nullptr;
    }
}

// charclass._all_in from TokenTable.summary: rows whose ASCII code points are all in (mlo, mhi) and whose code points
// from 128 on lie within one of the ranges `na` (mode 0: any, 1: none allowed, 2: within one range)
PyObject* all_in(PyObject*, PyObject* args) {
    PyObject *lo_o, *hi_o, *nmin_o, *nmax_o, *na_o, *cand_o = Py_None, *off_o = nullptr, *rows_o = nullptr;
    unsigned long long mlo, mhi;
    int mode;
    Py_ssize_t k0 = 0;
    if (!PyArg_ParseTuple(args, "OOOOKKiO|OnOO", &lo_o, &hi_o, &nmin_o, &nmax_o, &mlo, &mhi, &mode, &na_o, &cand_o,
                          &k0, &off_o, &rows_o))
        return nullptr;
    try {
        Buf lo, hi, nmin, nmax;
        lo.open(lo_o, 8);
        hi.open(hi_o, 8);
        nmin.open(nmin_o, 8);
        nmax.open(nmax_o, 8);
        std::vector<std::pair<int64_t, int64_t>> na;
        Py_ssize_t m = PyTuple_Size(na_o);
        if (m < 0) throw PyFail();
        for (Py_ssize_t i = 0; i < m; i++) {
            PyObject* it = PyTuple_GetItem(na_o, i);
            long long a = PyLong_AsLongLong(PyTuple_GetItem(it, 0));
            long long b = PyLong_AsLongLong(PyTuple_GetItem(it, 1));
            if (PyErr_Occurred()) throw PyFail();
            na.emplace_back(a, b);
        }
        Py_ssize_t n = lo.len;
        Ref out(PyByteArray_FromStringAndSize(nullptr, n));
        if (!out.p) return nullptr;
        uint8_t* r = (uint8_t*)PyByteArray_AS_STRING(out.p);
        const uint64_t *l = (const uint64_t*)lo.ptr, *h = (const uint64_t*)hi.ptr;
        const int64_t *a = (const int64_t*)nmin.ptr, *b = (const int64_t*)nmax.ptr;
        const uint64_t nlo = ~(uint64_t)mlo, nhi = ~(uint64_t)mhi;
        auto row_in = [&](Py_ssize_t i) -> bool {
            bool ok = (l[i] & nlo) == 0 && (h[i] & nhi) == 0;
            if (ok && mode != 0 && b[i] >= 0) {
                ok = false;
                if (mode == 2)
                    for (const auto& rg : na)
                        if (a[i] >= rg.first && b[i] <= rg.second) {
                            ok = true;
                            break;
                        }
            }
            return ok;
        };
        if (cand_o != Py_None) {   // only the candidate rows (those whose first code point the class matches: no
                                   // other row with a code point is wholly in it) and the rows from k0 on
            Buf cand;
            cand.open(cand_o, 8);
            std::memset(r, 0, (size_t)n);
            const int64_t* cp = (const int64_t*)cand.ptr;
            for (Py_ssize_t j = 0; j < cand.len; j++) {
                int64_t i = cp[j];
                if (i < 0 || i >= n) {
                    PyErr_SetString(PyExc_ValueError, "all_in: row out of range");
                    return nullptr;
                }
                r[i] = row_in((Py_ssize_t)i);
            }
            for (Py_ssize_t i = std::max<Py_ssize_t>(k0, 0); i < n; i++) r[i] = row_in(i);
            PyObject* o = out.p;
            out.p = nullptr;
            return o;
        }
        if (off_o && rows_o && off_o != Py_None) {   // the inverted ASCII index (TokenTable.ascii_rows): from the excluded code points
            Buf off, rws;
            off.open(off_o, 8);
            rws.open(rows_o, 8);
            const int64_t* of = (const int64_t*)off.ptr;
            const int64_t* rw = (const int64_t*)rws.ptr;
            if (off.len != 129) {
                PyErr_SetString(PyExc_ValueError, "all_in: the ASCII index needs 129 offsets");
                return nullptr;
            }
            int64_t total = 0;
            for (int cp = 0; cp < 128; cp++)
                if (!((cp < 64 ? (uint64_t)mlo >> cp : (uint64_t)mhi >> (cp - 64)) & 1)) total += of[cp + 1] - of[cp];
            if (total * 4 < n) {
                std::memset(r, 1, (size_t)n);
                for (int cp = 0; cp < 128; cp++) {
                    if ((cp < 64 ? (uint64_t)mlo >> cp : (uint64_t)mhi >> (cp - 64)) & 1) continue;
                    for (int64_t j = of[cp]; j < of[cp + 1]; j++) {
                        int64_t row = rw[j];
                        if (row < 0 || row >= n || j >= rws.len) {
                            PyErr_SetString(PyExc_ValueError, "all_in: row out of range");
                            return nullptr;
                        }
                        r[row] = 0;
                    }
                }
                if (mode != 0)
                    for (Py_ssize_t i = 0; i < n; i++) {
                        if (!r[i] || b[i] < 0) continue;
                        bool ok = false;
                        if (mode == 2)
                            for (const auto& rg : na)
                                if (a[i] >= rg.first && b[i] <= rg.second) {
                                    ok = true;
                                    break;
                                }
                        r[i] = ok;
                    }
                PyObject* o = out.p;
                out.p = nullptr;
                return o;
            }
        }
        if (mode != 2) {   // branch-free: no code point from 128 on allowed (1) or any allowed (0)
            for (Py_ssize_t i = 0; i < n; i++)
                r[i] = (uint8_t)((((l[i] & nlo) | (h[i] & nhi)) == 0) & ((mode == 0) | (b[i] < 0)));
            PyObject* o = out.p;
            out.p = nullptr;
            return o;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            bool ok = (l[i] & nlo) == 0 && (h[i] & nhi) == 0;
            if (ok && mode != 0 && b[i] >= 0) {
                ok = false;
                if (mode == 2)
                    for (const auto& rg : na)
                        if (a[i] >= rg.first && b[i] <= rg.second) {
                            ok = true;
                            break;
                        }
            }
            r[i] = ok;
        }
        PyObject* o = out.p;
        out.p = nullptr;
        return o;
    } catch (PyFail&) {
        return nullptr;
    }
}

// charclass._loop_parts at depth 0, in one pass: (clean, outside, pending, rest, clean_bits) of a loop on a class over a
// table, from its all_in rows; clean_bits (packed over ids, np.packbits order) only where ids (every id once) are given
PyObject* loop_parts(PyObject*, PyObject* args) {
    PyObject *inside_o, *rem_o, *col0_o, *items_o, *ids_o = Py_None, *first_o = Py_None, *inv_o = Py_None;
    Py_ssize_t k0;
    int positive;
    if (!PyArg_ParseTuple(args, "OOnOpO|OOO", &inside_o, &rem_o, &k0, &col0_o, &positive, &items_o, &ids_o, &first_o,
                          &inv_o))
        return nullptr;
    try {
        Buf inside, rem, col0, ids;
        inside.open(inside_o, 1);
        rem.open(rem_o, 1);     // int8
        col0.open(col0_o, 4);
        Py_ssize_t n = rem.len;
        if (inside.len < k0 || col0.len < k0 || k0 > n) {
            PyErr_SetString(PyExc_ValueError, "loop_parts: short buffers");
            return nullptr;
        }
        const int32_t* id = nullptr;
        if (ids_o != Py_None) {
            ids.open(ids_o, 4);   // int32
            if (ids.len != n) {
                PyErr_SetString(PyExc_ValueError, "loop_parts: ids must cover the rows");
                return nullptr;
            }
            id = (const int32_t*)ids.ptr;
        }
        Buf invb;
        const int32_t* inv = nullptr;
        if (id && inv_o != Py_None) {   // the row of each id (int32): dense sets are gathered in id order
            invb.open(inv_o, 4);
            if (invb.len != n) {
                PyErr_SetString(PyExc_ValueError, "loop_parts: inv must cover the ids");
                return nullptr;
            }
            inv = (const int32_t*)invb.ptr;
        }
        Class c;
        c.positive = positive != 0;
        Py_ssize_t m = PyTuple_Size(items_o);
        if (m < 0) throw PyFail();
        for (Py_ssize_t i = 0; i < m; i++) {
            PyObject* it = PyTuple_GetItem(items_o, i);
            long long lo = PyLong_AsLongLong(PyTuple_GetItem(it, 0));
            long long hi = PyLong_AsLongLong(PyTuple_GetItem(it, 1));
            if (PyErr_Occurred()) throw PyFail();
            c.items.emplace_back(lo, hi);
        }
        Ref clean(PyByteArray_FromStringAndSize(nullptr, n)), outside(PyByteArray_FromStringAndSize(nullptr, n));
        if (!clean.p || !outside.p) return nullptr;
        uint8_t* cl = (uint8_t*)PyByteArray_AS_STRING(clean.p);
        uint8_t* ou = (uint8_t*)PyByteArray_AS_STRING(outside.p);
        std::memset(cl, 0, (size_t)n);
        std::memset(ou, 1, (size_t)n);
        const uint8_t* in = (const uint8_t*)inside.ptr;
        const int8_t* rm = (const int8_t*)rem.ptr;
        const int32_t* c0 = (const int32_t*)col0.ptr;
        std::vector<int64_t> pending, rest;
        Buf first;
        const int64_t* fr = nullptr;
        if (first_o != Py_None) {   // the rows whose first code point the class matches, ascending: the only ones
            first.open(first_o, 8);   // that can be wholly in it or walked
            fr = (const int64_t*)first.ptr;
        }
        const Py_ssize_t count = fr ? first.len : k0;
        for (Py_ssize_t j = 0; j < count; j++) {
            Py_ssize_t r = fr ? (Py_ssize_t)fr[j] : j;
            if (r < 0 || r >= k0) {
                PyErr_SetString(PyExc_ValueError, "loop_parts: row out of range");
                return nullptr;
            }
            if (in[r]) {
                if (rm[r] == 0) {
                    cl[r] = 1;
                    ou[r] = 0;
                } else if (rm[r] > 0) {
                    pending.push_back(r);
                }
            } else if (fr || Walk::match(c, c0[r])) {
                rest.push_back(r);
            }
        }
        Ref p(PyByteArray_FromStringAndSize((const char*)pending.data(), (Py_ssize_t)(pending.size() * 8)));
        Ref q(PyByteArray_FromStringAndSize((const char*)rest.data(), (Py_ssize_t)(rest.size() * 8)));
        if (!p.p || !q.p) return nullptr;
        Ref bits;
        if (id) {
            bits = Ref(PyByteArray_FromStringAndSize(nullptr, (n + 7) / 8));
            if (!bits.p) return nullptr;
            if (!walk_helpers::pack_by_rows(cl, id, inv, n, (uint8_t*)PyByteArray_AS_STRING(bits.p))) return nullptr;
        }
        return Py_BuildValue("(OOOOO)", clean.p, outside.p, p.p, q.p, bits.p ? bits.p : Py_None);
    } catch (PyFail&) {
        return nullptr;
    }
}

PyMethodDef module_methods[] = {
    {"loop_parts", (PyCFunction)loop_parts, METH_VARARGS, "(clean, pending, rest) of a loop (charclass._loop_parts)."},
    {"pack_ids", (PyCFunction)pack_ids, METH_VARARGS, "pack_ids(acc, ids, nbits): np.packbits(by_id(acc))."},
    {"all_in", (PyCFunction)all_in, METH_VARARGS, "The rows of a table wholly inside a class (charclass._all_in)."},
    {"closure_bytes", (PyCFunction)walk_helpers::closure_bytes, METH_VARARGS,
     "The byte stream of GrammarRules._closure_digest (None past the element bound)."},
    {"pack_rows", (PyCFunction)walk_helpers::pack_rows, METH_VARARGS,
     "Packed bits over ids of a bool over the rows of a table holding every id once (packing.pack_by_id)."},
    {"by_rows", (PyCFunction)walk_helpers::by_rows, METH_VARARGS, "mask[ids]: a mask over ids read over rows."},
    {"set_rows", (PyCFunction)walk_helpers::set_rows, METH_VARARGS, "mask[ids[acc]] = True, in place."},
    {"set_bits", (PyCFunction)walk_helpers::set_bits, METH_VARARGS, "Ids set in a packed row (LSB first), in place."},
    {"first_rows", (PyCFunction)walk_helpers::first_rows, METH_VARARGS,
     "The rows whose first code point a class matches, ascending (charclass._first_rows)."},
    {"advance_table", (PyCFunction)walk_helpers::advance_table, METH_VARARGS,
     "The element table of advance (types, rule refs, alternatives) as bytes."},
    {"advance", (PyCFunction)walk_helpers::advance, METH_VARARGS,
     "GrammarRules.advance: the stacks one stack expands to (an int error code, or None: use the Python loop)."},
    {"decode_pieces", (PyCFunction)walk_helpers::decode_pieces, METH_VARARGS,
     "decode_pieces(pieces, skip) -> (length, rem, val, flat): tokenindex._vocab_table's decode (int64 bytearrays)."},
    {nullptr, nullptr, 0, nullptr}};

PyMethodDef Kernel_methods[] = {
    {"walk", (PyCFunction)Kernel_walk, METH_VARARGS, "The mask walk (see constrained.grammar.mask.walk)."},
    {nullptr, nullptr, 0, nullptr}};

PyTypeObject KernelType = {PyVarObject_HEAD_INIT(nullptr, 0)};

PyModuleDef walk_module = {PyModuleDef_HEAD_INIT, "_walk",
                           "The compiled mask walk of constrained.grammar.mask (optional).", -1, module_methods};

}  // namespace

PyMODINIT_FUNC PyInit__walk(void) {
    KernelType.tp_name = "constrained.grammar._walk.Kernel";
    KernelType.tp_basicsize = sizeof(KernelObject);
    KernelType.tp_flags = Py_TPFLAGS_DEFAULT;
    KernelType.tp_new = Kernel_new;
    KernelType.tp_init = (initproc)Kernel_init;
    KernelType.tp_dealloc = (destructor)Kernel_dealloc;
    KernelType.tp_methods = Kernel_methods;
    KernelType.tp_doc = "The compiled mask walk bound to one grammar's stack machine.";
    if (PyType_Ready(&KernelType) < 0) return nullptr;
    PyObject* m = PyModule_Create(&walk_module);
    if (!m) return nullptr;
    Py_INCREF(&KernelType);
    if (PyModule_AddObject(m, "Kernel", (PyObject*)&KernelType) < 0) {
        Py_DECREF(&KernelType);
        Py_DECREF(m);
        return nullptr;
    }
    return m;
}
