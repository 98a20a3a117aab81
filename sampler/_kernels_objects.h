// sampler/_kernels_objects.h: the two Python types of sampler._kernels, included by _kernels.cpp only (after its
// argument helpers, which it uses).
//
// * Mt19937: a std::mt19937 owned by a Python object -- the engine llama.cpp's drawing samplers own (dist, XTC,
//   mirostat, adaptive-p: `std::mt19937 rng` in llama-sampler.cpp) -- with sampler.rng.Mt19937's interface (seed,
//   next_u32, discard, getstate/setstate in the same (624 words, index) form, clone, ==).  A drawing kernel given
//   one draws from it directly, inside the same call as the stage.
// * Stage: one sampler stage with its parameters parsed once, whose apply(candidates) is a C method: it reads the
//   candidate array's record buffer, size and sorted flag straight from sampler.candidates.Candidates' slots
//   (bind_candidates), runs the stage and writes them back.  A Candidates not in record form goes to the stage's
//   Python apply (the fallback), which packs it or runs the float-array path.

// (inside _kernels.cpp's anonymous namespace: no #include here; <random>, <sstream> come from _kernels.cpp)

struct GenObject {
    PyObject_HEAD
    std::mt19937 eng;
};

static PyTypeObject GenType = {PyVarObject_HEAD_INIT(nullptr, 0)};

static bool is_gen(PyObject *o) { return PyObject_TypeCheck(o, &GenType); }

// a seed as rng.Mt19937 takes it: an int (not a bool), reduced modulo 2**32
static bool as_seed(PyObject *o, uint32_t &out) {
    if (PyBool_Check(o) || !PyIndex_Check(o)) {
        PyErr_Format(PyExc_TypeError, "Mt19937 seed must be an int, got %s", Py_TYPE(o)->tp_name);
        return false;
    }
    PyObject *i = PyNumber_Index(o);
    if (!i) return false;
    unsigned long v = PyLong_AsUnsignedLongMask(i);
    Py_DECREF(i);
    if (v == (unsigned long)-1 && PyErr_Occurred()) return false;
    out = (uint32_t)v;
    return true;
}

static PyObject *gen_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static const char *kwlist[] = {"seed", nullptr};
    PyObject *so = nullptr;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:Mt19937", const_cast<char **>(kwlist), &so)) return nullptr;
    uint32_t seed = 5489u;
    if (so && !as_seed(so, seed)) return nullptr;
    GenObject *g = reinterpret_cast<GenObject *>(type->tp_alloc(type, 0));
    if (!g) return nullptr;
    new (&g->eng) std::mt19937(seed);
    return reinterpret_cast<PyObject *>(g);
}

static void gen_dealloc(PyObject *self) {
    reinterpret_cast<GenObject *>(self)->eng.~mersenne_twister_engine();
    Py_TYPE(self)->tp_free(self);
}

static std::mt19937 &eng_of(PyObject *self) { return reinterpret_cast<GenObject *>(self)->eng; }

// seed(s): as std::mt19937::seed(s)
static PyObject *gen_seed(PyObject *self, PyObject *so) {
    uint32_t seed;
    if (!as_seed(so, seed)) return nullptr;
    eng_of(self).seed(seed);
    Py_RETURN_NONE;
}

static PyObject *gen_next(PyObject *self, PyObject *) { return PyLong_FromUnsignedLong((unsigned long)eng_of(self)()); }

static PyObject *gen_call(PyObject *self, PyObject *args, PyObject *kw) {
    if (PyTuple_GET_SIZE(args) != 0 || (kw && PyDict_GET_SIZE(kw) != 0))
        return PyErr_Format(PyExc_TypeError, "Mt19937() takes no arguments when called");
    return gen_next(self, nullptr);
}

static PyObject *gen_discard(PyObject *self, PyObject *no) {
    long long n = PyLong_AsLongLong(no);
    if (n == -1 && PyErr_Occurred()) return nullptr;
    if (n > 0) eng_of(self).discard((unsigned long long)n);
    Py_RETURN_NONE;
}

// getstate() -> (624 words, index): libstdc++'s operator<< writes the words x[0..623] then the index p
static PyObject *gen_getstate(PyObject *self, PyObject *) {
    std::ostringstream os;
    os << eng_of(self);
    std::istringstream is(os.str());
    PyObject *words = PyTuple_New(624);
    if (!words) return nullptr;
    unsigned long long v = 0;
    for (Py_ssize_t i = 0; i < 624; ++i) {
        is >> v;
        PyObject *w = PyLong_FromUnsignedLongLong(v);
        if (!w) {
            Py_DECREF(words);
            return nullptr;
        }
        PyTuple_SET_ITEM(words, i, w);
    }
    is >> v;
    return Py_BuildValue("(NK)", words, v);
}

// setstate((624 words, index)): operator>> reads them back in the same order
static PyObject *gen_setstate(PyObject *self, PyObject *st) {
    PyObject *words = nullptr, *index = nullptr;
    if (!PyArg_ParseTuple(st, "OO:setstate", &words, &index)) return nullptr;
    PyObject *seq = PySequence_Fast(words, "an mt19937 state is 624 words and an index in [0, 624]");
    if (!seq) return nullptr;
    long long p = PyLong_AsLongLong(index);
    if ((p == -1 && PyErr_Occurred()) || PySequence_Fast_GET_SIZE(seq) != 624 || p < 0 || p > 624) {
        Py_DECREF(seq);
        PyErr_Clear();
        return PyErr_Format(PyExc_ValueError, "an mt19937 state is 624 words and an index in [0, 624]");
    }
    std::ostringstream os;
    for (Py_ssize_t i = 0; i < 624; ++i) {
        unsigned long w = PyLong_AsUnsignedLongMask(PySequence_Fast_GET_ITEM(seq, i));
        if (w == (unsigned long)-1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return nullptr;
        }
        os << (w & 0xFFFFFFFFul) << ' ';
    }
    Py_DECREF(seq);
    os << p;
    std::istringstream is(os.str());
    is >> eng_of(self);
    Py_RETURN_NONE;
}

static PyObject *gen_clone(PyObject *self, PyObject *) {
    PyTypeObject *type = Py_TYPE(self);
    GenObject *g = reinterpret_cast<GenObject *>(type->tp_alloc(type, 0));
    if (!g) return nullptr;
    new (&g->eng) std::mt19937(eng_of(self));
    return reinterpret_cast<PyObject *>(g);
}

// == as operator== on engines (the same state: the same outputs from here on)
static PyObject *gen_richcompare(PyObject *a, PyObject *b, int op) {
    if ((op != Py_EQ && op != Py_NE) || !is_gen(b)) Py_RETURN_NOTIMPLEMENTED;
    const bool eq = eng_of(a) == eng_of(b);
    return PyBool_FromLong(op == Py_EQ ? eq : !eq);
}

static PyMethodDef gen_methods[] = {
    {"seed", gen_seed, METH_O, "seed(s): re-seed exactly as std::mt19937::seed(s)"},
    {"next_u32", gen_next, METH_NOARGS, "next_u32() -> one output, as rng()"},
    {"discard", gen_discard, METH_O, "discard(n): advance by n outputs"},
    {"getstate", gen_getstate, METH_NOARGS, "getstate() -> (624 state words, index)"},
    {"setstate", gen_setstate, METH_O, "setstate((words, index)): restore a state from getstate()"},
    {"clone", gen_clone, METH_NOARGS, "clone() -> an independent copy in the same state"},
    {nullptr, nullptr, 0, nullptr}};

// the draws argument of a drawing kernel: a Mt19937 (drawn from in the call) or a tuple of at most two outputs
static bool as_draws(PyObject *o, uint32_t u[2], Replay &g) {
    if (is_gen(o)) {
        g.eng = &eng_of(o);
        return true;
    }
    return as_u32s(o, u, g.n);
}

// ---------------------------------------------------------------------------------------------------------------
// Candidates' slots (sampler/candidates.py: __slots__), found once by bind_candidates

static PyTypeObject *cand_type = nullptr;
static Py_ssize_t off_rec = -1, off_n = -1, off_sorted = -1, off_selected = -1;

static bool slot_offset(PyTypeObject *t, const char *name, Py_ssize_t &off) {
    PyObject *d = PyDict_GetItemString(t->tp_dict, name);  // borrowed
    if (!d || !PyObject_TypeCheck(d, &PyMemberDescr_Type)) {
        PyErr_Format(PyExc_TypeError, "%s has no slot %s", t->tp_name, name);
        return false;
    }
    PyMemberDef *m = reinterpret_cast<PyMemberDescrObject *>(d)->d_member;
    if (m->type != T_OBJECT_EX) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not an object slot", t->tp_name, name);
        return false;
    }
    off = m->offset;
    return true;
}

// bind_candidates(Candidates): remember the class whose _rec, _n, sorted and selected slots Stage.apply reads
static PyObject *k_bind_candidates(PyObject *, PyObject *cls) {
    if (!PyType_Check(cls)) return PyErr_Format(PyExc_TypeError, "expected the Candidates class");
    PyTypeObject *t = reinterpret_cast<PyTypeObject *>(cls);
    Py_ssize_t r, n, s, sel;
    if (!slot_offset(t, "_rec", r) || !slot_offset(t, "_n", n) || !slot_offset(t, "sorted", s) ||
        !slot_offset(t, "selected", sel))
        return nullptr;
    Py_INCREF(cls);
    Py_XSETREF(cand_type, t);
    off_rec = r, off_n = n, off_sorted = s, off_selected = sel;
    Py_RETURN_NONE;
}

static PyObject *&slot(PyObject *o, Py_ssize_t off) { return *reinterpret_cast<PyObject **>(reinterpret_cast<char *>(o) + off); }

static bool set_slot(PyObject *o, Py_ssize_t off, PyObject *v) {  // steals v
    if (!v) return false;
    Py_XSETREF(slot(o, off), v);
    return true;
}

// ---------------------------------------------------------------------------------------------------------------
// Stage

enum StageCode {
    S_TOP_P = 2, S_MIN_P = 3, S_TYPICAL = 4, S_TEMP_EXT = 5, S_DIST = 6, S_XTC = 7, S_ADAPTIVE_P = 8, S_TOP_N_SIGMA = 9
};

struct StageObject {
    PyObject_HEAD
    int code;
    size_t min_keep;
    float f1, f2, f3;
    PyObject *gen;       // a Mt19937 (dist, XTC, adaptive-p) or nullptr
    PyObject *fallback;  // called with candidates not in record form, or nullptr: they are packed (records())
    // adaptive-p: the state llama_sampler_adaptive_p keeps beside its generator (llama-sampler.cpp:3727)
    float weighted_sum, total_weight;
    int32_t pending_id, pending_idx;
    std::vector<float> *original_probs;
};

static void ap_reset(StageObject *s) {  // as llama_sampler_adaptive_p_reset, the generator aside
    s->weighted_sum = s->f1 / (1.0f - s->f2);
    s->total_weight = 1.0f / (1.0f - s->f2);
    s->pending_id = -1;  // LLAMA_TOKEN_NULL
    s->pending_idx = -1;
    s->original_probs->clear();
}

static PyTypeObject StageType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// Stage(code, min_keep, f1, f2, f3, generator or None, fallback or None): top-p/min-p/typical (p = f1), temp-ext
// (temp, delta, exponent), dist (generator), XTC (probability, threshold; generator), adaptive-p (target >= 0,
// decay; generator), top-n-sigma (n)
static PyObject *stage_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    int code;
    long long mk;
    float f1, f2, f3;
    PyObject *gen, *fb;
    if (kw && PyDict_GET_SIZE(kw)) return PyErr_Format(PyExc_TypeError, "Stage() takes no keyword arguments");
    if (!PyArg_ParseTuple(args, "iLfffOO:Stage", &code, &mk, &f1, &f2, &f3, &gen, &fb)) return nullptr;
    if (code < S_TOP_P || code > S_TOP_N_SIGMA) return PyErr_Format(PyExc_ValueError, "unknown stage code %d", code);
    const bool draws = code == S_DIST || code == S_XTC || code == S_ADAPTIVE_P;
    if (draws != (gen != Py_None) || (gen != Py_None && !is_gen(gen)))
        return PyErr_Format(PyExc_TypeError, "dist, XTC and adaptive-p take a sampler._kernels.Mt19937, the others None");
    if (code == S_ADAPTIVE_P && !(f1 >= 0.0f && f2 >= 0.0f && f2 <= 0.99f))
        return PyErr_Format(PyExc_ValueError, "adaptive-p here takes a target >= 0 and a decay in [0, 0.99]");
    if (fb != Py_None && !PyCallable_Check(fb)) return PyErr_Format(PyExc_TypeError, "the fallback must be callable");
    StageObject *s = reinterpret_cast<StageObject *>(type->tp_alloc(type, 0));
    if (!s) return nullptr;
    s->code = code;
    s->min_keep = (size_t)mk;  // llama.cpp's size_t from an int: a negative value wraps, as the C conversion does
    s->f1 = f1, s->f2 = f2, s->f3 = f3;
    s->gen = draws ? Py_NewRef(gen) : nullptr;
    s->fallback = fb != Py_None ? Py_NewRef(fb) : nullptr;
    if (code == S_ADAPTIVE_P) {
        s->original_probs = new (std::nothrow) std::vector<float>();
        if (!s->original_probs) {
            Py_DECREF(s);
            return PyErr_NoMemory();
        }
        ap_reset(s);
    }
    return reinterpret_cast<PyObject *>(s);
}

static int stage_traverse(PyObject *self, visitproc visit, void *arg) {
    StageObject *s = reinterpret_cast<StageObject *>(self);
    Py_VISIT(s->gen);
    Py_VISIT(s->fallback);
    return 0;
}

static int stage_clear(PyObject *self) {
    StageObject *s = reinterpret_cast<StageObject *>(self);
    Py_CLEAR(s->gen);
    Py_CLEAR(s->fallback);
    return 0;
}

static void stage_dealloc(PyObject *self) {
    PyObject_GC_UnTrack(self);
    stage_clear(self);
    delete reinterpret_cast<StageObject *>(self)->original_probs;
    Py_TYPE(self)->tp_free(self);
}

static PyObject *size_error() { return PyErr_Format(PyExc_RuntimeError, "GGML_ASSERT(cur_p->size > 0) failed"); }

// whether the stage returns at once whatever the array (its parameters switch it off)
static bool stage_off(const StageObject *s) {
    switch (s->code) {
        case S_TOP_P:
        case S_TYPICAL: return s->f1 >= 1.0f;
        case S_MIN_P: return s->f1 <= 0.0f;
        case S_XTC: return s->f1 <= 0.0f || s->f2 > 0.5f;
        case S_TOP_N_SIGMA: return s->f1 <= 0.0f;
        default: return false;
    }
}

static PyObject *records_str = nullptr;  // "records"

// apply(candidates): the stage on the candidate array, in place (as the Python apply it stands for)
static PyObject *stage_apply(PyObject *self, PyObject *cand) {
    StageObject *s = reinterpret_cast<StageObject *>(self);
    if (Py_TYPE(cand) != cand_type) return PyErr_Format(PyExc_TypeError, "expected a sampler.candidates.Candidates");
    PyObject *rec = slot(cand, off_rec);
    if (!rec || rec == Py_None) {  // the three-array form
        if (stage_off(s)) Py_RETURN_NONE;
        if (s->fallback) return PyObject_CallOneArg(s->fallback, cand);
        PyObject *r = PyObject_CallMethodNoArgs(cand, records_str);  // Candidates.records(): pack them
        if (!r) return nullptr;
        Py_DECREF(r);
        rec = slot(cand, off_rec);
        if (!rec || rec == Py_None) return PyErr_Format(PyExc_RuntimeError, "Candidates.records() left no records");
    }
    PyObject *no = slot(cand, off_n), *so = slot(cand, off_sorted);
    if (!no || !so) return PyErr_Format(PyExc_AttributeError, "Candidates without _n or sorted");
    size_t n;
    if (!as_size(no, n)) return nullptr;
    const int sorted = PyObject_IsTrue(so);
    if (sorted < 0) return nullptr;
    // the early returns of each stage's apply, before the buffer is touched
    if (stage_off(s)) Py_RETURN_NONE;
    switch (s->code) {
        case S_TOP_P:
        case S_TYPICAL:
            if (n == 0) return size_error();
            break;
        case S_MIN_P:
            if (n == 0) Py_RETURN_NONE;
            break;
        case S_DIST:  // nothing to select, no draw
            if (n == 0) return set_slot(cand, off_selected, PyLong_FromLong(-1)) ? Py_NewRef(Py_None) : nullptr;
            break;
        case S_XTC:  // no draw below two candidates
            if (n < 2) Py_RETURN_NONE;
            break;
        case S_ADAPTIVE_P:
            if (n == 0) return size_error();
            break;
        case S_TOP_N_SIGMA:
            if (n <= 1) Py_RETURN_NONE;
            break;
        default: break;
    }
    // read the slot again now that no Python code can run before the buffer holds its own reference (the truth
    // test above could have run some)
    rec = slot(cand, off_rec);
    if (!rec || rec == Py_None) return PyErr_Format(PyExc_RuntimeError, "Candidates lost its records");
    Buf b;
    if (!get_records(rec, b, n)) return nullptr;
    Cur c{static_cast<TokenData *>(b.v.buf), n, sorted == 1};
    switch (s->code) {
        case S_TOP_P: top_p_impl(c, s->f1, s->min_keep); break;
        case S_MIN_P: min_p_impl(c, s->f1, s->min_keep); break;
        case S_TYPICAL: typical_impl(c, s->f1, s->min_keep); break;
        case S_TEMP_EXT: temp_ext_impl(c, s->f1, s->f2, s->f3); break;
        case S_TOP_N_SIGMA: {  // in place on the records' logits (stride 12); nothing is removed or reordered
            const Floats lg{reinterpret_cast<char *>(&c.data[0].logit), (std::ptrdiff_t)sizeof(TokenData),
                            (std::ptrdiff_t)n};
            top_n_sigma_impl(lg, n, s->f1, lg);
            Py_RETURN_NONE;
        }
        case S_DIST: {
            Replay g{nullptr, 0, 0, &eng_of(s->gen)};
            const size_t sel = dist_impl(c, g);
            if (!set_slot(cand, off_selected, PyLong_FromSize_t(sel))) return nullptr;
            Py_RETURN_NONE;  // size and sorted unchanged
        }
        case S_XTC: {
            Replay g{nullptr, 0, 0, &eng_of(s->gen)};
            std::uniform_real_distribution<float> distribution(0.0f, 1.0f);
            if (distribution(g) > s->f1) Py_RETURN_NONE;
            xtc_impl(c, s->f2, s->min_keep);
            break;
        }
        case S_ADAPTIVE_P: {
            Replay g{nullptr, 0, 0, &eng_of(s->gen)};
            s->original_probs->resize(n);
            const int idx = adaptive_p_impl(c, s->f1, s->weighted_sum, s->total_weight, s->original_probs->data(), g);
            if (!set_slot(cand, off_selected, PyLong_FromLong(idx))) return nullptr;
            s->pending_id = c.data[idx].id;  // the selected token, for the accept that follows
            s->pending_idx = idx;
            Py_RETURN_NONE;
        }
    }
    if (c.size != n && !set_slot(cand, off_n, PyLong_FromSize_t(c.size))) return nullptr;
    if (c.sorted != (sorted == 1)) Py_XSETREF(slot(cand, off_sorted), Py_NewRef(c.sorted ? Py_True : Py_False));
    Py_RETURN_NONE;
}

static bool is_adaptive(StageObject *s) {
    if (s->code == S_ADAPTIVE_P) return true;
    PyErr_SetString(PyExc_TypeError, "only an adaptive-p stage has this method");
    return false;
}

// accept(token): as llama_sampler_adaptive_p_accept (the EMA takes the selected token's original probability)
static PyObject *stage_accept(PyObject *self, PyObject *tok) {
    StageObject *s = reinterpret_cast<StageObject *>(self);
    if (!is_adaptive(s)) return nullptr;
    int overflow = 0;
    const long long t = PyLong_AsLongLongAndOverflow(tok, &overflow);
    if (t == -1 && PyErr_Occurred()) return nullptr;
    if (!overflow && s->pending_id != -1 && t == s->pending_id && s->pending_idx >= 0 &&
        (size_t)s->pending_idx < s->original_probs->size()) {
        s->weighted_sum = (*s->original_probs)[(size_t)s->pending_idx] + s->f2 * s->weighted_sum;
        s->total_weight = 1.0f + s->f2 * s->total_weight;
    }
    s->pending_id = -1;
    s->pending_idx = -1;
    Py_RETURN_NONE;
}

// reset(): the EMA state as llama_sampler_adaptive_p_reset sets it (the caller re-seeds the generator)
static PyObject *stage_reset(PyObject *self, PyObject *) {
    StageObject *s = reinterpret_cast<StageObject *>(self);
    if (!is_adaptive(s)) return nullptr;
    ap_reset(s);
    Py_RETURN_NONE;
}

// clone(generator): a copy with the same state drawing from the given generator
static PyObject *stage_clone(PyObject *self, PyObject *gen) {
    StageObject *s = reinterpret_cast<StageObject *>(self);
    if (!is_adaptive(s)) return nullptr;
    if (!is_gen(gen)) return PyErr_Format(PyExc_TypeError, "expected a sampler._kernels.Mt19937");
    StageObject *o = reinterpret_cast<StageObject *>(Py_TYPE(self)->tp_alloc(Py_TYPE(self), 0));
    if (!o) return nullptr;
    o->code = s->code, o->min_keep = s->min_keep, o->f1 = s->f1, o->f2 = s->f2, o->f3 = s->f3;
    o->gen = Py_NewRef(gen);
    o->fallback = Py_XNewRef(s->fallback);
    o->weighted_sum = s->weighted_sum, o->total_weight = s->total_weight;
    o->pending_id = s->pending_id, o->pending_idx = s->pending_idx;
    o->original_probs = new (std::nothrow) std::vector<float>(*s->original_probs);
    if (!o->original_probs) {
        Py_DECREF(o);
        return PyErr_NoMemory();
    }
    return reinterpret_cast<PyObject *>(o);
}

// state() -> (weighted_sum, total_weight, pending_id, pending_idx)
static PyObject *stage_state(PyObject *self, PyObject *) {
    StageObject *s = reinterpret_cast<StageObject *>(self);
    if (!is_adaptive(s)) return nullptr;
    return Py_BuildValue("(ddii)", (double)s->weighted_sum, (double)s->total_weight, (int)s->pending_id,
                         (int)s->pending_idx);
}

static PyMethodDef stage_methods[] = {
    {"apply", stage_apply, METH_O, "apply(candidates): the stage on a sampler.candidates.Candidates, in place"},
    {"accept", stage_accept, METH_O, "accept(token): adaptive-p's EMA update"},
    {"reset", stage_reset, METH_NOARGS, "reset(): adaptive-p's EMA state back to its start"},
    {"clone", stage_clone, METH_O, "clone(generator) -> an adaptive-p stage with the same state"},
    {"state", stage_state, METH_NOARGS, "state() -> (weighted_sum, total_weight, pending_id, pending_idx)"},
    {nullptr, nullptr, 0, nullptr}};

static bool ready_types(PyObject *m) {
    GenType.tp_name = "sampler._kernels.Mt19937";
    GenType.tp_basicsize = sizeof(GenObject);
    GenType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE;
    GenType.tp_doc = "std::mt19937 (libstdc++) owned by a Python object; the interface of sampler.rng.Mt19937";
    GenType.tp_new = gen_new;
    GenType.tp_dealloc = gen_dealloc;
    GenType.tp_call = gen_call;
    GenType.tp_richcompare = gen_richcompare;
    GenType.tp_hash = PyObject_HashNotImplemented;
    GenType.tp_methods = gen_methods;
    StageType.tp_name = "sampler._kernels.Stage";
    StageType.tp_basicsize = sizeof(StageObject);
    StageType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC;
    StageType.tp_doc = "one sampler stage with its parameters parsed; apply(candidates) runs it in C";
    StageType.tp_new = stage_new;
    StageType.tp_dealloc = stage_dealloc;
    StageType.tp_traverse = stage_traverse;
    StageType.tp_clear = stage_clear;
    StageType.tp_methods = stage_methods;
    if (PyType_Ready(&GenType) < 0 || PyType_Ready(&StageType) < 0) return false;
    if (!records_str && !(records_str = PyUnicode_InternFromString("records"))) return false;
    if (PyModule_AddObjectRef(m, "Mt19937", reinterpret_cast<PyObject *>(&GenType)) < 0) return false;
    if (PyModule_AddObjectRef(m, "Stage", reinterpret_cast<PyObject *>(&StageType)) < 0) return false;
    return true;
}
