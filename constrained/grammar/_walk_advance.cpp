// The compiled twin of GrammarRules.advance (stacks.py), as llama_grammar_advance_stack (src/llama-grammar.cpp:
// a LIFO work list, a seen set, the terminal-topped stacks in discovery order). The Python method stays the reference
// and the fallback: every case this code does not mirror bit for bit (a position outside the element vector, an
// element that is not a 32-bit int) returns None and the caller runs the Python loop, which then raises what it
// raises. The errors the Python raises are returned as codes (the caller raises the same exceptions):
//   -1  more than max_stacks stacks seen (GrammarLimitError, "expanding one stack")
//   p>=0  a stack top at a non-terminal element at position p (GrammarStateError)
//
//   advance_table(types, values, rule_start, bottom, RULE_REF, ALT) -> bytes    the element types, the rule id of each RULE_REF and
//                                                               each rule's alternatives (GrammarRules.alternatives)
//   advance(table, stack, max_stacks, RULE_REF, END, ALT, terminals) -> tuple of stacks | int | None
#include "_walk.h"

#include <cstdint>
#include <cstring>
#include <new>
#include <unordered_set>
#include <vector>

namespace walk_helpers {

namespace {

// table layout (int32 words): n, n_rules, n_alts, types[n], refs[n], alt_off[n_rules + 1], alts[n_alts]
struct Table {
    int32_t n = 0, n_rules = 0, n_alts = 0;
    const int32_t* types = nullptr;
    const int32_t* refs = nullptr;
    const int32_t* alt_off = nullptr;
    const int32_t* alts = nullptr;
    bool read(PyObject* b) {
        if (!PyBytes_Check(b)) {
            PyErr_SetString(PyExc_TypeError, "advance: the table must be the bytes of advance_table");
            return false;
        }
        Py_ssize_t len = PyBytes_GET_SIZE(b);
        const int32_t* w = reinterpret_cast<const int32_t*>(PyBytes_AS_STRING(b));
        if (len < 12 || len % 4) goto bad;
        n = w[0], n_rules = w[1], n_alts = w[2];
        if (n < 0 || n_rules < 0 || n_alts < 0 ||
            len / 4 != 3 + 2 * (Py_ssize_t)n + (Py_ssize_t)n_rules + 1 + (Py_ssize_t)n_alts)
            goto bad;
        types = w + 3;
        refs = types + n;
        alt_off = refs + n;
        alts = alt_off + n_rules + 1;
        return true;
    bad:
        PyErr_SetString(PyExc_ValueError, "advance: malformed table");
        return false;
    }
};

bool as_i32(PyObject* o, int32_t* out) {  // false (no error set) unless o is an int fitting int32
    if (!PyLong_Check(o)) return false;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return false;
    }
    if (v < INT32_MIN || v > INT32_MAX) return false;
    *out = (int32_t)v;
    return true;
}

bool seq_i32(PyObject* o, std::vector<int32_t>& out, const char* what) {
    PyObject* f = PySequence_Fast(o, what);
    if (!f) return false;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(f);
    out.resize(k);
    PyObject** items = PySequence_Fast_ITEMS(f);
    for (Py_ssize_t i = 0; i < k; i++)
        if (!as_i32(items[i], &out[i])) {
            Py_DECREF(f);
            PyErr_Format(PyExc_ValueError, "advance_table: %s holds a value that is not a 32-bit int", what);
            return false;
        }
    Py_DECREF(f);
    return true;
}

// the stacks of one expansion, in one arena
struct Arena {
    std::vector<int32_t> data;
    std::vector<std::pair<size_t, uint32_t>> spans;  // (offset, length) per stack id
    uint64_t hash(uint32_t id) const {
        const auto& s = spans[id];
        uint64_t h = 1469598103934665603ull ^ s.second;
        for (uint32_t i = 0; i < s.second; i++) h = (h ^ (uint32_t)data[s.first + i]) * 1099511628211ull;
        return h;
    }
    bool equal(uint32_t a, uint32_t b) const {
        const auto &x = spans[a], &y = spans[b];
        return x.second == y.second &&
               (x.second == 0 || std::memcmp(&data[x.first], &data[y.first], x.second * sizeof(int32_t)) == 0);
    }
};

struct Hash {
    const Arena* a;
    size_t operator()(uint32_t id) const { return (size_t)a->hash(id); }
};
struct Eq {
    const Arena* a;
    bool operator()(uint32_t x, uint32_t y) const { return a->equal(x, y); }
};

// impl(args), its std::bad_alloc answered as MemoryError
PyObject* guarded(PyObject* (*impl)(PyObject*), PyObject* args) {
    try {
        return impl(args);
    } catch (const std::bad_alloc&) {
        return PyErr_NoMemory();
    }
}

PyObject* advance_table_impl(PyObject* args) {
    PyObject *types_o, *values_o, *starts_o;
    long long bottom;
    int rule_ref, alt;
    if (!PyArg_ParseTuple(args, "OOOLii:advance_table", &types_o, &values_o, &starts_o, &bottom, &rule_ref, &alt))
        return nullptr;
    std::vector<int32_t> types, values, starts;
    if (!seq_i32(types_o, types, "types") || !seq_i32(values_o, values, "values") ||
        !seq_i32(starts_o, starts, "rule_start"))
        return nullptr;
    const Py_ssize_t n = (Py_ssize_t)types.size(), n_rules = (Py_ssize_t)starts.size();
    if ((Py_ssize_t)values.size() != n || n >= INT32_MAX / 4 || bottom < 0 || bottom > n) {
        PyErr_SetString(PyExc_ValueError, "advance_table: inconsistent types/values/bottom");
        return nullptr;
    }
    std::vector<int32_t> alt_off(n_rules + 1), alts;
    for (Py_ssize_t r = 0; r < n_rules; r++) {  // as GrammarRules.alternatives: the start, then after each ALT
        alt_off[r] = (int32_t)alts.size();
        Py_ssize_t start = starts[r], stop = r + 1 < n_rules ? starts[r + 1] : (Py_ssize_t)bottom;
        if (start < 0 || start > n || stop > n) {
            PyErr_SetString(PyExc_ValueError, "advance_table: rule_start out of range");
            return nullptr;
        }
        alts.push_back((int32_t)start);
        for (Py_ssize_t i = start; i < stop; i++)
            if (types[i] == alt) alts.push_back((int32_t)(i + 1));
    }
    alt_off[n_rules] = (int32_t)alts.size();
    std::vector<int32_t> refs(n);
    for (Py_ssize_t i = 0; i < n; i++) refs[i] = types[i] == rule_ref ? values[i] : -1;
    for (Py_ssize_t i = 0; i < n; i++)
        if (refs[i] != -1 && (refs[i] < 0 || refs[i] >= n_rules)) refs[i] = -1;  // checked at init: never here
    const Py_ssize_t words = 3 + 2 * n + n_rules + 1 + (Py_ssize_t)alts.size();
    PyObject* b = PyBytes_FromStringAndSize(nullptr, words * 4);
    if (!b) return nullptr;
    int32_t* w = reinterpret_cast<int32_t*>(PyBytes_AS_STRING(b));
    w[0] = (int32_t)n, w[1] = (int32_t)n_rules, w[2] = (int32_t)alts.size();
    std::memcpy(w + 3, types.data(), n * 4);
    std::memcpy(w + 3 + n, refs.data(), n * 4);
    std::memcpy(w + 3 + 2 * n, alt_off.data(), (n_rules + 1) * 4);
    if (!alts.empty()) std::memcpy(w + 3 + 2 * n + n_rules + 1, alts.data(), alts.size() * 4);
    return b;
}

PyObject* advance_impl(PyObject* args) {
    PyObject *table_o, *stack_o, *terms_o;
    Py_ssize_t max_stacks;
    int rule_ref, end, alt;
    if (!PyArg_ParseTuple(args, "OO!niiiO:advance", &table_o, &PyTuple_Type, &stack_o, &max_stacks, &rule_ref, &end,
                          &alt, &terms_o))
        return nullptr;
    Table t;
    if (!t.read(table_o)) return nullptr;
    bool terminal[256] = {};
    {
        std::vector<int32_t> terms;
        if (!seq_i32(terms_o, terms, "terminals")) return nullptr;
        for (int32_t x : terms)
            if (x >= 0 && x < 256) terminal[x] = true;
    }
    Arena a;
    const Py_ssize_t k0 = PyTuple_GET_SIZE(stack_o);
    a.data.resize(k0);
    for (Py_ssize_t i = 0; i < k0; i++)
        if (!as_i32(PyTuple_GET_ITEM(stack_o, i), &a.data[i])) Py_RETURN_NONE;  // the Python loop decides
    a.spans.push_back({0, (uint32_t)k0});
    std::unordered_set<uint32_t, Hash, Eq> seen(16, Hash{&a}, Eq{&a});
    std::vector<uint32_t> todo{0}, out;
    while (!todo.empty()) {
        const uint32_t cur = todo.back();
        todo.pop_back();
        if (!seen.insert(cur).second) continue;
        if ((Py_ssize_t)seen.size() > max_stacks) return PyLong_FromLong(-1);
        const size_t off = a.spans[cur].first;
        const uint32_t len = a.spans[cur].second;
        if (len == 0) {
            out.push_back(cur);
            continue;
        }
        const int32_t pos = a.data[off + len - 1];
        if (pos < 0 || pos + 1 >= t.n) Py_RETURN_NONE;  // Python's indexing (negative, IndexError) decides
        const int32_t ty = t.types[pos];
        if (ty == rule_ref) {
            const int32_t nt = t.types[pos + 1];
            const bool keep = !(nt == end || nt == alt);  // base = cur[:-1] (+ (pos + 1,) unless is_eos(pos + 1))
            const int32_t rid = t.refs[pos];
            if (rid < 0 || rid >= t.n_rules) Py_RETURN_NONE;
            for (int32_t j = t.alt_off[rid]; j < t.alt_off[rid + 1]; j++) {
                const int32_t sub = t.alts[j];
                if (sub < 0 || sub >= t.n) Py_RETURN_NONE;
                const int32_t st = t.types[sub];
                const bool push_sub = !(st == end || st == alt);
                const size_t noff = a.data.size();
                const uint32_t nlen = len - 1 + (keep ? 1 : 0) + (push_sub ? 1 : 0);
                a.data.resize(noff + nlen);  // may move: copy through indices
                std::memmove(a.data.data() + noff, a.data.data() + off, (len - 1) * sizeof(int32_t));
                size_t w = noff + len - 1;
                if (keep) a.data[w++] = pos + 1;
                if (push_sub) a.data[w++] = sub;
                a.spans.push_back({noff, nlen});
                if (a.spans.size() >= UINT32_MAX) return PyErr_NoMemory();
                todo.push_back((uint32_t)(a.spans.size() - 1));
            }
        } else if (ty >= 0 && ty < 256 && terminal[ty]) {
            out.push_back(cur);
        } else {
            return PyLong_FromLong(pos);
        }
    }
    PyObject* res = PyTuple_New((Py_ssize_t)out.size());
    if (!res) return nullptr;
    for (size_t i = 0; i < out.size(); i++) {
        const auto& s = a.spans[out[i]];
        PyObject* st = PyTuple_New(s.second);
        if (!st) {
            Py_DECREF(res);
            return nullptr;
        }
        for (uint32_t j = 0; j < s.second; j++) {
            PyObject* v = PyLong_FromLong(a.data[s.first + j]);
            if (!v) {
                Py_DECREF(st);
                Py_DECREF(res);
                return nullptr;
            }
            PyTuple_SET_ITEM(st, j, v);
        }
        PyTuple_SET_ITEM(res, (Py_ssize_t)i, st);
    }
    return res;
}

}  // namespace

PyObject* advance_table(PyObject*, PyObject* args) { return guarded(advance_table_impl, args); }

PyObject* advance(PyObject*, PyObject* args) { return guarded(advance_impl, args); }

}  // namespace walk_helpers
