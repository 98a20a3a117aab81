// sampler._kernels: llama.cpp's sampler stages (src/llama-sampler.cpp at 0c1e57098) compiled, on an array laid out
// as llama_token_data ({int32 id, float logit, float p}), so that libstdc++'s std::sort / std::partial_sort run with
// llama.cpp's comparator on the same records and give the same tie orders by construction.
//
// Our own code, written to the semantics of the functions cited beside each one: the sorts in _kernels_sort.h, the
// stages in _kernels_stages.h, the Python bindings here.  Built with -O2 -std=c++17 -ffp-contract=off and no
// fast-math (pyproject.toml); expf/logf/log2f/powf/exp come from libm, as in llama.cpp.
// Random draws stay in Python (sampler.rng.Mt19937): a stage that draws receives the generator's 32-bit outputs
// and hands them to libstdc++'s own distributions through a replaying generator (Replay).
//
// Binding: the CPython C API with the buffer protocol (no numpy headers); every function is METH_FASTCALL.
// A record buffer is any C-contiguous writable buffer of at least n * 12 bytes (numpy's REC dtype in
// sampler/kernels.py); a float buffer is a 1-D float32 buffer of any stride.

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "_kernels_stages.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <sstream>
#include <vector>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace {

using namespace ck;

// ---------------------------------------------------------------------------------------------------------------
// argument handling

struct Buf {
    Py_buffer v;
    bool ok = false;
    ~Buf() {
        if (ok) PyBuffer_Release(&v);
    }
};

static bool get_records(PyObject *o, Buf &b, size_t n) {
    if (PyObject_GetBuffer(o, &b.v, PyBUF_WRITABLE | PyBUF_ND) < 0) return false;
    b.ok = true;
    if ((size_t)b.v.len < n * sizeof(TokenData)) {
        PyErr_SetString(PyExc_ValueError, "record buffer smaller than n records");
        return false;
    }
    return true;
}

static bool get_floats(PyObject *o, Buf &b, Floats &f, bool writable) {
    int flags = PyBUF_STRIDES | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(o, &b.v, flags) < 0) return false;
    b.ok = true;
    const char *fmt = b.v.format ? b.v.format : "B";
    if (b.v.ndim != 1 || b.v.itemsize != 4 || !(strcmp(fmt, "f") == 0 || strcmp(fmt, "<f") == 0 || strcmp(fmt, "=f") == 0)) {
        PyErr_SetString(PyExc_TypeError, "expected a 1-D float32 buffer");
        return false;
    }
    f.base = static_cast<char *>(b.v.buf);
    f.stride = b.v.strides[0];
    f.n = b.v.shape[0];
    return true;
}

static bool get_ints(PyObject *o, Buf &b, const int32_t *&p, Py_ssize_t &n) {
    if (PyObject_GetBuffer(o, &b.v, PyBUF_ND | PyBUF_FORMAT) < 0) return false;
    b.ok = true;
    const char *fmt = b.v.format ? b.v.format : "B";
    if (b.v.ndim != 1 || b.v.itemsize != 4 || !(fmt[strlen(fmt) - 1] == 'i' || fmt[strlen(fmt) - 1] == 'l')) {
        PyErr_SetString(PyExc_TypeError, "expected a contiguous 1-D int32 buffer");
        return false;
    }
    p = static_cast<const int32_t *>(b.v.buf);
    n = b.v.shape[0];
    return true;
}

static bool nargs_is(Py_ssize_t nargs, Py_ssize_t want, const char *name) {
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name, want, nargs);
        return false;
    }
    return true;
}

static bool as_size(PyObject *o, size_t &out) {
    Py_ssize_t v = PyLong_AsSsize_t(o);
    if (v == -1 && PyErr_Occurred()) return false;
    if (v < 0) {
        PyErr_SetString(PyExc_ValueError, "negative size");
        return false;
    }
    out = (size_t)v;
    return true;
}

static bool as_float(PyObject *o, float &out) {
    double v = PyFloat_AsDouble(o);
    if (v == -1.0 && PyErr_Occurred()) return false;
    out = (float)v;
    return true;
}

static bool as_u32s(PyObject *o, uint32_t out[2], int &n) {
    // a tuple of at most two generator outputs
    if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) > 2) {
        PyErr_SetString(PyExc_TypeError, "expected a tuple of at most two 32-bit draws");
        return false;
    }
    n = (int)PyTuple_GET_SIZE(o);
    for (int i = 0; i < n; ++i) {
        unsigned long v = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(o, i));
        if (v == (unsigned long)-1 && PyErr_Occurred()) return false;
        out[i] = (uint32_t)v;
    }
    return true;
}

// (size, sorted) packed into one int: size * 2 + sorted
static PyObject *packed(const Cur &c) { return PyLong_FromSsize_t((Py_ssize_t)(c.size * 2 + (c.sorted ? 1 : 0))); }

#define ARGS(name, want) \
    if (!nargs_is(nargs, want, name)) return nullptr

static bool cur_args(PyObject *const *args, Buf &b, Cur &c) {
    size_t n;
    if (!as_size(args[1], n)) return false;
    if (!get_records(args[0], b, n)) return false;
    c.data = static_cast<TokenData *>(b.v.buf);
    c.size = n;
    c.sorted = PyObject_IsTrue(args[2]) == 1;
    return true;
}

#include "_kernels_objects.h"

// ---------------------------------------------------------------------------------------------------------------
// conversions

// pack(out_records, logits, ids or None, p or None): out[i] = {ids[i] or i, logits[i], p[i] or 0}
static PyObject *k_pack(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
    ARGS("pack", 4);
    Buf bl, bo, bi, bp;
    Floats lg, pp{};
    if (!get_floats(args[1], bl, lg, false)) return nullptr;
    size_t n = (size_t)lg.n;
    if (!get_records(args[0], bo, n)) return nullptr;
    const int32_t *ids = nullptr;
    Py_ssize_t ni = 0;
    if (args[2] != Py_None) {
        if (!get_ints(args[2], bi, ids, ni)) return nullptr;
        if ((size_t)ni != n) return PyErr_Format(PyExc_ValueError, "ids and logits differ in length");
    }
    bool hasp = args[3] != Py_None;
    if (hasp) {
        if (!get_floats(args[3], bp, pp, false)) return nullptr;
        if ((size_t)pp.n != n) return PyErr_Format(PyExc_ValueError, "p and logits differ in length");
    }
    TokenData *o = static_cast<TokenData *>(bo.v.buf);
    for (size_t i = 0; i < n; ++i) o[i] = {ids ? ids[i] : (int32_t)i, lg[i], hasp ? pp[i] : 0.0f};
    Py_RETURN_NONE;
}

// top_k(logits, ids or None, p or None, k, out_records, nan_check) -> k taken, or -1 when nan_check finds a NaN:
// llama_sampler_top_k_impl on an unsorted array (partial_sort_inplace, k <= 128 path or the bucket path)
static PyObject *k_top_k(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
    ARGS("top_k", 6);
    Buf bl, bi, bp, bo;
    Floats lg, pp{};
    if (!get_floats(args[0], bl, lg, false)) return nullptr;
    size_t n = (size_t)lg.n, k;
    const int32_t *ids = nullptr;
    Py_ssize_t ni = 0;
    if (args[1] != Py_None) {
        if (!get_ints(args[1], bi, ids, ni)) return nullptr;
        if ((size_t)ni != n) return PyErr_Format(PyExc_ValueError, "ids and logits differ in length");
    }
    bool hasp = args[2] != Py_None;
    if (hasp) {
        if (!get_floats(args[2], bp, pp, false)) return nullptr;
        if ((size_t)pp.n != n) return PyErr_Format(PyExc_ValueError, "p and logits differ in length");
    }
    if (!as_size(args[3], k)) return nullptr;
    k = std::min(k, n);
    bool nan_check = PyObject_IsTrue(args[5]) == 1;
    auto get = [&](size_t i) { return TokenData{ids ? ids[i] : (int32_t)i, lg[i], hasp ? pp[i] : 0.0f}; };
    if (k <= 128 && n >= 256) {
        if (!get_records(args[4], bo, k)) return nullptr;
        const float *contiguous = lg.stride == 4 ? reinterpret_cast<const float *>(lg.base) : nullptr;
        if (top_select(n, k, get, static_cast<TokenData *>(bo.v.buf), contiguous) && nan_check)
            return PyLong_FromLong(-1);
    } else {
        if (nan_check) {
            for (size_t i = 0; i < n; ++i) {
                if (lg[i] != lg[i]) return PyLong_FromLong(-1);
            }
        }
        // the bucket path (or a small array): on a full record copy, as llama.cpp's array
        if (!get_records(args[4], bo, n)) return nullptr;
        TokenData *o = static_cast<TokenData *>(bo.v.buf);
        for (size_t i = 0; i < n; ++i) o[i] = get(i);
        if (k > 0) partial_sort_inplace(o, n, (int)k);
    }
    return PyLong_FromSize_t(k);
}

// ---------------------------------------------------------------------------------------------------------------
// stages on records: f(records, n, sorted, ...) -> size * 2 + sorted unless said otherwise

// as llama_sampler_top_k_impl
static PyObject *k_top_k_rec(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
    ARGS("top_k_rec", 4);
    Buf b;
    Cur c;
    if (!cur_args(args, b, c)) return nullptr;
    long k = PyLong_AsLong(args[3]);
    if (k == -1 && PyErr_Occurred()) return nullptr;
    top_k_impl(c, (int32_t)std::max(std::min(k, (long)INT32_MAX), (long)INT32_MIN));
    return packed(c);
}

static PyObject *k_softmax(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
    ARGS("softmax", 4);
    Buf b;
    Cur c;
    if (!cur_args(args, b, c)) return nullptr;
    if (c.size == 0) return PyErr_Format(PyExc_RuntimeError, "GGML_ASSERT(cur_p->size > 0) failed");
    softmax_impl(c, PyObject_IsTrue(args[3]) == 1);
    return packed(c);
}

#define STAGE_ARGS(name, want)                                               \
    ARGS(name, want);                                                        \
    Buf b;                                                                   \
    Cur c;                                                                   \
    if (!cur_args(args, b, c)) return nullptr

// temp(records, n, sorted, temp) -> packed: llama_sampler_temp_impl
static PyObject *k_temp(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
    STAGE_ARGS("temp", 4);
    float t;
    if (!as_float(args[3], t)) return nullptr;
    temp_impl(c, t);
    return packed(c);
}

// temp_floats(src, temp, dst) -> None: llama_sampler_temp_impl on a logit array (dst may be src)
static PyObject *k_temp_floats(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
    ARGS("temp_floats", 3);
    Buf bs, bd;
    Floats src, dst;
    float temp;
    if (!get_floats(args[0], bs, src, false) || !as_float(args[1], temp) || !get_floats(args[2], bd, dst, true))
        return nullptr;
    const size_t n = (size_t)src.n;
    if ((size_t)dst.n != n) return PyErr_Format(PyExc_ValueError, "src and dst differ in length");
    if (n == 0) Py_RETURN_NONE;
    if (temp <= 0.0f) {
        size_t max_i = 0;
        float max_l = src[0];
        for (size_t i = 1; i < n; ++i) {
            if (src[i] > max_l) {
                max_i = i;
                max_l = src[i];
            }
        }
        for (size_t i = 0; i < n; ++i) dst[i] = -INFINITY;
        dst[max_i] = max_l;
        Py_RETURN_NONE;
    }
    size_t i = 0;
#ifdef __SSE2__
    if (src.stride == 4 && dst.stride == 4) {  // the same IEEE division, four at a time
        const float *sp = reinterpret_cast<const float *>(src.base);
        float *dp = reinterpret_cast<float *>(dst.base);
        const __m128 t4 = _mm_set1_ps(temp);
        for (; i + 4 <= n; i += 4) _mm_storeu_ps(dp + i, _mm_div_ps(_mm_loadu_ps(sp + i), t4));
    }
#endif
    for (; i < n; ++i) dst[i] = src[i] / temp;
    Py_RETURN_NONE;
}

// run(records, n, sorted, program, draws) -> (packed, selected): several stages in one call, program being a
// buffer of Op records (sampler/kernels.py: OP) applied in order; a final dist takes the two draws
struct Op {
    int32_t code;  // 1 top-k, 2 top-p, 3 min-p, 4 typical, 5 temp-ext, 6 dist
    int32_t i1;    // k or min_keep
    float f1, f2, f3;
};
static_assert(sizeof(Op) == 20, "the layout of kernels.OP");

static PyObject *k_run(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
    STAGE_ARGS("run", 5);
    Buf bp;
    uint32_t u[2];
    Replay g{u, 0, 0};
    if (PyObject_GetBuffer(args[3], &bp.v, PyBUF_ND) < 0) return nullptr;
    bp.ok = true;
    if (!as_draws(args[4], u, g)) return nullptr;
    const Op *ops = static_cast<const Op *>(bp.v.buf);
    const size_t nops = (size_t)bp.v.len / sizeof(Op);
    long selected = -1;
    for (size_t j = 0; j < nops; ++j) {
        const Op &o = ops[j];
        if (c.size == 0 && o.code != 3 && o.code != 1)
            return PyErr_Format(PyExc_RuntimeError, "GGML_ASSERT(cur_p->size > 0) failed");
        switch (o.code) {
            case 1: top_k_impl(c, o.i1); break;
            case 2: top_p_impl(c, o.f1, (size_t)(int64_t)o.i1); break;
            case 3: min_p_impl(c, o.f1, (size_t)(int64_t)o.i1); break;
            case 4: typical_impl(c, o.f1, (size_t)(int64_t)o.i1); break;
            case 5: temp_ext_impl(c, o.f1, o.f2, o.f3); break;
            case 6: {
                selected = (long)dist_impl(c, g);
                break;
            }
            default: return PyErr_Format(PyExc_ValueError, "unknown op %d", (int)o.code);
        }
    }
    PyObject *pk = packed(c);
    if (!pk) return nullptr;
    PyObject *r = Py_BuildValue("(Nl)", pk, selected);
    return r;
}

// discrete(records, n, draws) -> index: llama_sample_dist (std::discrete_distribution<int>); fewer than two
// records return 0 without a draw (libstdc++'s empty table)
static PyObject *k_discrete(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
    ARGS("discrete", 3);
    Buf b;
    size_t n;
    uint32_t u[2];
    Replay g{u, 0, 0};
    if (!as_size(args[1], n) || !get_records(args[0], b, n) || !as_draws(args[2], u, g)) return nullptr;
    Cur c{static_cast<TokenData *>(b.v.buf), n, false};
    return PyLong_FromLong(sample_dist(c, g));
}

// mirostat(records, n, sorted, n_vocab, m, mu) -> packed: llama_sampler_mirostat_apply (llama-sampler.cpp:2460)
// up to its draw
static PyObject *k_mirostat(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
    ARGS("mirostat", 6);
    Buf b;
    Cur c;
    float mu;
    long n_vocab = PyLong_AsLong(args[3]);
    long m = PyLong_AsLong(args[4]);
    if (PyErr_Occurred() || !cur_args(args, b, c) || !as_float(args[5], mu)) return nullptr;
    if (c.size == 0) return PyErr_Format(PyExc_RuntimeError, "GGML_ASSERT(cur_p->size > 0) failed");
    softmax_impl(c, true);
    float s_hat = 0.0;
    float sum_ti_bi = 0.0;
    float sum_ti_sq = 0.0;
    for (size_t i = 0; i < size_t(int32_t(m) - 1) && i < c.size - 1; ++i) {
        const float t_i = logf(float(i + 2) / float(i + 1));
        const float b_i = logf(c.data[i].p / c.data[i + 1].p);
        sum_ti_bi += t_i * b_i;
        sum_ti_sq += t_i * t_i;
    }
    s_hat = sum_ti_bi / sum_ti_sq;
    const float epsilon_hat = s_hat - 1;
    const float k = powf((epsilon_hat * powf(2, mu)) / (1 - powf((float)(int32_t)n_vocab, -epsilon_hat)), 1 / s_hat);
    const int ki = (std::fabs(k) < 2147483648.0f) ? int(k) : INT32_MIN;  // int(float) as cvttss2si
    top_k_impl(c, std::max(ki, 1));
    softmax_impl(c, true);
    return packed(c);
}

// mirostat_v2(records, n, sorted, mu) -> packed: llama_sampler_mirostat_v2_apply (llama-sampler.cpp:2573) up to
// its draw
static PyObject *k_mirostat_v2(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
    ARGS("mirostat_v2", 4);
    Buf b;
    Cur c;
    float mu;
    if (!cur_args(args, b, c) || !as_float(args[3], mu)) return nullptr;
    if (c.size == 0) return PyErr_Format(PyExc_RuntimeError, "GGML_ASSERT(cur_p->size > 0) failed");
    softmax_impl(c, true);
    size_t i = 0;
    while (i < c.size && !(-log2f(c.data[i].p) > mu)) ++i;
    c.size = i == 0 ? 1 : i;
    softmax_impl(c, true);
    return packed(c);
}

// mirostat_mu(p, mu, tau, eta) -> the new mu: -log2f(p) - tau, mu - eta * e, in float
static PyObject *k_mirostat_mu(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
    ARGS("mirostat_mu", 4);
    float p, mu, tau, eta;
    if (!as_float(args[0], p) || !as_float(args[1], mu) || !as_float(args[2], tau) || !as_float(args[3], eta))
        return nullptr;
    const float observed_surprise = -log2f(p);
    const float e = observed_surprise - tau;
    return PyFloat_FromDouble((double)(mu - eta * e));
}

// top_n_sigma(src, n, dst) -> None: dst (may be src) gets src with every logit below max - n * std set to -inf
static PyObject *k_top_n_sigma(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
    ARGS("top_n_sigma", 3);
    Buf bs, bd;
    Floats src, dst;
    float nsig;
    if (!get_floats(args[0], bs, src, false) || !as_float(args[1], nsig)) return nullptr;
    if (!get_floats(args[2], bd, dst, true)) return nullptr;
    const size_t n = (size_t)src.n;
    if ((size_t)dst.n != n) return PyErr_Format(PyExc_ValueError, "src and dst differ in length");
    if (nsig <= 0.0f || n <= 1) {
        if (dst.base != src.base)
            for (size_t i = 0; i < n; ++i) dst[i] = src[i];
        Py_RETURN_NONE;
    }
    top_n_sigma_impl(src, n, nsig, dst);
    Py_RETURN_NONE;
}

// ---------------------------------------------------------------------------------------------------------------
// DRY (llama-sampler.cpp:3386, llama_sampler_dry_apply), steps 1-3: the restart-sequence limit, the reverse
// Z-algorithm's repeat counts and the longest repeat each next token would extend

// dry_repeats(last_tokens, last_n, allowed_length, breakers) -> {token: repeat length} or None (no penalty):
// last_tokens in order (oldest first, a deque or list of ints; its last last_n count), breakers a dict head token
// -> list of tail tuples
static PyObject *k_dry_repeats(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
    ARGS("dry_repeats", 4);
    long last_n = PyLong_AsLong(args[1]);
    long allowed = PyLong_AsLong(args[2]);
    if (PyErr_Occurred()) return nullptr;
    PyObject *breakers = args[3];
    if (!PyDict_Check(breakers)) return PyErr_Format(PyExc_TypeError, "breakers must be a dict");
    PyObject *seq = PySequence_Fast(args[0], "last_tokens must be iterable");
    if (!seq) return nullptr;
    const Py_ssize_t total = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    const int n = (int)std::min<Py_ssize_t>(total, (Py_ssize_t)std::max(last_n, 0L));
    if (n <= allowed) {
        Py_DECREF(seq);
        Py_RETURN_NONE;
    }
    // rat(i): the i-th most recent token (ring_buffer::rat)
    std::vector<int32_t> rat(n);
    for (int i = 0; i < n; ++i) {
        long v = PyLong_AsLong(items[total - 1 - i]);
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return nullptr;
        }
        rat[i] = (int32_t)v;
    }
    int rep_limit = n;
    if (PyDict_GET_SIZE(breakers) > 0) {
        for (int i = 0; i < n; ++i) {
            PyObject *tails = PyDict_GetItemWithError(breakers, items[total - 1 - i]);
            if (!tails) {
                if (PyErr_Occurred()) {
                    Py_DECREF(seq);
                    return nullptr;
                }
                continue;
            }
            PyObject *tl = PySequence_Fast(tails, "breaker tails must be a sequence");
            if (!tl) {
                Py_DECREF(seq);
                return nullptr;
            }
            int longest = -1;
            for (Py_ssize_t t = 0; t < PySequence_Fast_GET_SIZE(tl); ++t) {
                PyObject *tail = PySequence_Fast_GET_ITEM(tl, t);
                const Py_ssize_t sl = PySequence_Size(tail);
                if (sl < 0) {
                    Py_DECREF(tl);
                    Py_DECREF(seq);
                    return nullptr;
                }
                if ((int)sl > longest && (int)sl <= i) {
                    bool match = true;
                    for (Py_ssize_t o = 0; o < sl && match; ++o) {
                        PyObject *x = PySequence_GetItem(tail, o);
                        long xv = x ? PyLong_AsLong(x) : -1;
                        Py_XDECREF(x);
                        if (PyErr_Occurred()) {
                            Py_DECREF(tl);
                            Py_DECREF(seq);
                            return nullptr;
                        }
                        match = (int32_t)xv == rat[i - o - 1];
                    }
                    if (match) longest = (int)sl;
                }
            }
            Py_DECREF(tl);
            if (longest >= 0) {
                rep_limit = i - longest;
                break;
            }
        }
    }
    Py_DECREF(seq);
    if (rep_limit < allowed) Py_RETURN_NONE;
    std::vector<int> count(n, 0);
    const int last = n - 1;
    int rt = 0, lt = 0;
    for (int k = 1; k < n; ++k) {
        if (k > rt) {
            int m = 0;
            while (m + k < n && rat[m] == rat[m + k]) ++m;
            count[last - k] = std::min(m, rep_limit);
            if (m > 0) {
                lt = k;
                rt = k + m - 1;
            }
        } else {
            const int p = k - lt;
            const int right_part_len = rt - k + 1;
            if (count[last - p] < right_part_len) {
                count[last - k] = std::min(count[last - p], rep_limit);
            } else {
                int i = rt + 1;
                while (i < n && rat[i] == rat[i - k]) i += 1;
                count[last - k] = std::min(i - k, rep_limit);
                lt = k;
                rt = i - 1;
            }
        }
    }
    PyObject *out = PyDict_New();
    if (!out) return nullptr;
    for (int i = 0; i < n - 1; ++i) {
        const int rl = count[i];
        if (rl >= allowed) {
            PyObject *key = PyLong_FromLong(rat[n - 2 - i]);
            PyObject *old = key ? PyDict_GetItemWithError(out, key) : nullptr;
            if (!key || (!old && PyErr_Occurred())) {
                Py_XDECREF(key);
                Py_DECREF(out);
                return nullptr;
            }
            if (!old || PyLong_AsLong(old) < rl) {
                PyObject *val = PyLong_FromLong(rl);
                if (!val || PyDict_SetItem(out, key, val) < 0) {
                    Py_XDECREF(val);
                    Py_DECREF(key);
                    Py_DECREF(out);
                    return nullptr;
                }
                Py_DECREF(val);
            }
            Py_DECREF(key);
        }
    }
    return out;
}

// ---------------------------------------------------------------------------------------------------------------

static PyMethodDef methods[] = {
    {"pack", (PyCFunction)(void (*)(void))k_pack, METH_FASTCALL, "pack(out, logits, ids, p): build records"},
    {"top_k", (PyCFunction)(void (*)(void))k_top_k, METH_FASTCALL,
     "top_k(logits, ids, p, k, out, nan_check) -> k: top-k of an unsorted array into records"},
    {"top_k_rec", (PyCFunction)(void (*)(void))k_top_k_rec, METH_FASTCALL, "top_k_rec(rec, n, sorted, k)"},
    {"softmax", (PyCFunction)(void (*)(void))k_softmax, METH_FASTCALL, "softmax(rec, n, sorted, do_sort)"},
    {"temp_floats", (PyCFunction)(void (*)(void))k_temp_floats, METH_FASTCALL, "temp_floats(src, temp, dst)"},
    {"temp", (PyCFunction)(void (*)(void))k_temp, METH_FASTCALL, "temp(rec, n, sorted, temp)"},
    {"run", (PyCFunction)(void (*)(void))k_run, METH_FASTCALL,
     "run(rec, n, sorted, program, draws) -> (packed, selected): fused stages"},
    {"discrete", (PyCFunction)(void (*)(void))k_discrete, METH_FASTCALL, "discrete(rec, n, draws) -> index"},
    {"mirostat", (PyCFunction)(void (*)(void))k_mirostat, METH_FASTCALL, "mirostat(rec, n, sorted, n_vocab, m, mu)"},
    {"mirostat_v2", (PyCFunction)(void (*)(void))k_mirostat_v2, METH_FASTCALL, "mirostat_v2(rec, n, sorted, mu)"},
    {"mirostat_mu", (PyCFunction)(void (*)(void))k_mirostat_mu, METH_FASTCALL, "mirostat_mu(p, mu, tau, eta)"},
    {"top_n_sigma", (PyCFunction)(void (*)(void))k_top_n_sigma, METH_FASTCALL, "top_n_sigma(src, n, dst)"},
    {"bind_candidates", k_bind_candidates, METH_O,
     "bind_candidates(Candidates): the class whose slots Stage.apply reads (sampler/candidates.py)"},
    {"dry_repeats", (PyCFunction)(void (*)(void))k_dry_repeats, METH_FASTCALL,
     "dry_repeats(last_tokens, last_n, allowed_length, breakers) -> {token: repeat length} or None"},
    {nullptr, nullptr, 0, nullptr}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernels",
                                    "llama.cpp's sampler stages compiled (see sampler/kernels.py)", -1, methods,
                                    nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__kernels(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && !ready_types(m)) Py_CLEAR(m);
    return m;
}
