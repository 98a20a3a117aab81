"""Params: defaults, request fields, clamps and refusals, GGUF sampling keys -- checked against llama.cpp's source
(common.h, server-schema.cpp, sampling.cpp), against nlohmann::json / std::to_string compiled from the sdist, and
against llama.cpp loading a GGUF with ``general.sampling.*`` keys."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from oracle.sdist import llama_cpp_source
from sampler.cconv import DEFAULT_SAMPLERS, SAMPLER_CHARS, SAMPLER_NAMES, f32, strtof
from sampler.chain import Sampler
from sampler.params import Params
from sampler.request import _FIELDS, _fmt, get_bool, get_float, get_int

SRC = llama_cpp_source()
COMMON_H = (SRC / "common" / "common.h").read_text()
SCHEMA = (SRC / "tools" / "server" / "server-schema.cpp").read_text()
SAMPLING = (SRC / "common" / "sampling.cpp").read_text()
SERVER_COMMON = (SRC / "tools" / "server" / "server-common.cpp").read_text()

_TYPE_NAMES = {"DRY": "dry", "TOP_K": "top_k", "TOP_P": "top_p", "TOP_N_SIGMA": "top_n_sigma", "TYPICAL_P": "typ_p",
               "MIN_P": "min_p", "TEMPERATURE": "temperature", "XTC": "xtc", "INFILL": "infill",
               "PENALTIES": "penalties", "ADAPTIVE_P": "adaptive_p"}


def test_defaults_match_common_h() -> None:
    body = COMMON_H[COMMON_H.index("struct common_params_sampling {"):]
    body = body[:body.index("\n};")]
    vals = dict(re.findall(r"^\s*(?:int32_t|float|uint32_t|bool)\s+(\w+)\s*=\s*([^;]+);", body, re.M))
    p = Params()
    checked = 0
    for name, v in vals.items():
        if not hasattr(p, name):
            continue
        v = v.strip()
        expect = 0xFFFFFFFF if v == "LLAMA_DEFAULT_SEED" else (v == "true") if v in ("true", "false") \
            else f32(float(v.rstrip("f"))) if "." in v else int(v)
        assert getattr(p, name) == expect, name
        checked += 1
    assert checked >= 25
    order = re.search(r"std::vector<enum common_sampler_type> samplers = \{(.*?)\};", body, re.S).group(1)
    assert tuple(_TYPE_NAMES[t] for t in re.findall(r"COMMON_SAMPLER_TYPE_(\w+)", order)) == DEFAULT_SAMPLERS
    br = re.search(r"dry_sequence_breakers = \{(.*?)\};", body).group(1)
    assert tuple(eval(s) for s in re.findall(r'"(?:[^"\\]|\\.)*"', br)) == p.dry_sequence_breakers


def test_sampler_names_and_chars_match_sampling_cpp() -> None:
    block = SAMPLING[SAMPLING.index("canonical_name_map {"):]
    block = block[:block.index("};")]
    canon = dict(re.findall(r'\{\s*"(\w+)",\s*COMMON_SAMPLER_TYPE_(\w+)\s*\}', block))
    assert len(canon) == 11
    assert {k: _TYPE_NAMES[v] for k, v in canon.items()} == {k: k for k in canon}
    chars = dict(re.findall(r"case COMMON_SAMPLER_TYPE_(\w+):\s*return '(\w)';", SAMPLING))
    assert {c: _TYPE_NAMES[t] for t, c in chars.items()} == SAMPLER_CHARS
    for alias in ("nucleus", "temp", "typ", "top-k", "topk", "min-p", "minp", "adaptive-p", "adaptivep"):
        assert alias in SAMPLER_NAMES
    assert "typical_p" not in SAMPLER_NAMES
    assert Params.from_request({"samplers": ["TOP-K", "typical_p", "Nucleus", "temp", "bogus"]}).samplers == \
        ("top_k", "top_p", "temperature")


def test_field_table_matches_server_schema() -> None:
    """Every numeric field of our table has llama-server's name, aliases, kind of limit and limits."""
    limits = {"INT32_MAX": 2**31 - 1, "std::numeric_limits<float>::infinity()": math.inf,
              "-std::numeric_limits<float>::max()": -float(np.finfo(np.float32).max),
              "std::numeric_limits<int64_t>::max()": 2**63 - 1}
    pos = 0
    for names, kind, lo, hi, hard, _attr in _FIELDS:
        if kind not in ("int", "int64", "float", "uint32"):
            m = re.search(rf'new field_\w+\("{names[0]}"', SCHEMA)
            assert m, names
            continue
        m = re.search(rf'new field_num\("{names[0]}", [^)]*\)\)(.*?)->set_desc', SCHEMA, re.S)
        assert m, names
        assert m.start() > pos, f"{names[0]} out of schema order"
        pos = m.start()
        tail = re.sub(r"//[^\n]*", "", m.group(1))  # drop commented-out limits
        assert re.findall(r'add_alias\("(\w+)"\)', tail) == list(names[1:])
        lm = re.search(r"->set_(hard_)?limits\(([^,]+),\s*([^)]+(?:\))?)\)", tail)
        if lm is None:
            assert not hard and (lo, hi) in ((-float(np.finfo(np.float32).max), float(np.finfo(np.float32).max)),
                                             (0, 2**32 - 1), (-(2**31), 2**31 - 1)), names
            continue
        assert bool(lm.group(1)) == hard, names
        src_lo = limits.get(lm.group(2).strip(), None)
        src_lo = src_lo if src_lo is not None else float(lm.group(2).rstrip("f"))
        src_hi = limits.get(lm.group(3).strip(), None)
        src_hi = src_hi if src_hi is not None else float(lm.group(3).rstrip("f"))
        assert (lo, hi) == ((f32(src_lo), f32(src_hi)) if kind == "float" and math.isfinite(src_hi) and
                            abs(src_lo) < 1e30 else (src_lo, src_hi)), names


JSON_VALUES = ['"x"', "-1", "1e40", "-1e40", "2.7", "-2.7", "true", "false", "null", "[1]", "{}", "4294967296",
               "2147483648", "-2147483649", "1e20", "0.1", "16777217", "9007199254740993", "1e-50"]


@pytest.mark.parametrize("kind", ["int32", "uint32", "float", "bool"])
def test_json_conversions_match_nlohmann(kind: str) -> None:
    cxx = pytest.importorskip("oracle.sampler_cxx")
    import json
    for text in JSON_VALUES:
        ok, want = cxx.json_get(text, kind)
        v = json.loads(text)
        try:
            if kind == "int32":
                got = str(get_int(v))
            elif kind == "uint32":
                got = str(get_int(v, 32, False))
            elif kind == "float":
                got = f"f{int(np.float32(get_float(v)).view(np.uint32)):08x}"
            else:
                got = str(int(get_bool(v)))
        except Exception as e:  # noqa: BLE001
            got = str(e)
            assert not ok, (text, kind, got, want)
        assert got == want, (text, kind)


def test_to_string_matches_libstdcxx() -> None:
    cxx = pytest.importorskip("oracle.sampler_cxx")
    for v in (0.0, 0.99, 1.0, 1.5, -3.25, 1e-7, 123456.789, f32(0.1)):
        assert _fmt("float", f32(v)) == cxx.to_string(f32(v), "float")
    for v in (0, -1, 2147483647, -2147483648):
        assert _fmt("int", v) == cxx.to_string(v, "int")


REFUSALS = [
    ({"repeat_last_n": -1}, "Field 'repeat_last_n': Value must be between 0 <= value <= 2147483647, but got -1"),
    ({"dry_allowed_length": -3}, "Field 'dry_allowed_length': Value must be between 0 <= value <= 2147483647, "
                                 "but got -3"),
    ({"dry_penalty_last_n": -1}, "Field 'dry_penalty_last_n': Value must be between 0 <= value <= 2147483647, "
                                 "but got -1"),
    ({"adaptive_decay": 1.5}, "Field 'adaptive_decay': Value must be between 0.000000 <= value <= 0.990000, "
                              "but got 1.500000"),
    ({"adaptive_decay": -0.1}, "Field 'adaptive_decay': Value must be between 0.000000 <= value <= 0.990000, "
                               "but got -0.100000"),
    ({"min_keep": -1}, "Field 'min_keep': Value must be between 0 <= value <= 2147483647, but got -1"),
    ({"n_predict": -2}, "Field 'n_predict': Value must be between -1 <= value <= 2147483647, but got -2"),
    ({"max_tokens": -2}, "Field 'max_tokens': Value must be between -1 <= value <= 2147483647, but got -2"),
    ({"dry_sequence_breakers": []}, "Field 'dry_sequence_breakers': Error: dry_sequence_breakers must be a "
                                    "non-empty array of strings"),
    ({"dry_sequence_breakers": "x"}, "Field 'dry_sequence_breakers': Error: dry_sequence_breakers must be a "
                                     "non-empty array of strings"),
    ({"top_k": "40"}, "Field 'top_k': [json.exception.type_error.302] type must be number, but is string"),
    ({"temperature": [1]}, "Field 'temperature': [json.exception.type_error.302] type must be number, but is array"),
    ({"ignore_eos": 1}, "Field 'ignore_eos': [json.exception.type_error.302] type must be boolean, but is number"),
    ({"samplers": ["top_k", 3]}, "Field 'samplers': [json.exception.type_error.302] type must be string, but is "
                                 "number"),
    ({"dry_base": "x"}, "Field 'dry_base': [json.exception.type_error.302] type must be number, but is string"),
    ({"repeat_last_n": -1, "min_keep": -1}, "Field 'repeat_last_n': Value must be between 0 <= value <= "
                                            "2147483647, but got -1"),
]


@pytest.mark.parametrize("body,msg", REFUSALS, ids=[m.split(":")[0] for _, m in REFUSALS])
def test_refusals(body: dict, msg: str) -> None:
    with pytest.raises(ValueError) as ei:
        Params.from_request(body)
    assert str(ei.value) == msg
    # the pieces of every message are llama-server's own text
    for frag in ("Value must be between ", " <= value <= ", ", but got ", "Field '%s': %s",
                 "Error: dry_sequence_breakers must be a non-empty array of strings"):
        assert frag in SCHEMA


def test_chat_logprobs() -> None:
    msg = "top_logprobs requires logprobs to be set to true"
    assert msg in SERVER_COMMON
    with pytest.raises(ValueError, match=f"^{msg}$"):
        Params.from_request({"messages": [], "top_logprobs": 3})
    assert Params.from_request({"messages": [], "logprobs": True}).n_probs == 20
    assert Params.from_request({"messages": [], "logprobs": True, "top_logprobs": 4}).n_probs == 4
    assert Params.from_request({"messages": [], "logprobs": False}).n_probs == 0
    assert Params.from_request({"logprobs": 7}).n_probs == 7   # /completion: an alias of n_probs
    assert Params.from_request({"n_probs": 2, "logprobs": 7}).n_probs == 2


@pytest.mark.parametrize("repeat,freq,present,msg", [
    (0.0, 0.0, 0.0, "penalty_repeat must be finite and greater than 0"),
    (-1.0, 0.0, 0.0, "penalty_repeat must be finite and greater than 0"),
    (1e-39, 0.0, 0.0, "penalty_repeat must be finite and greater than 0"),
    (math.inf, 0.0, 0.0, "penalty_repeat must be finite and greater than 0"),
    (1.0, math.inf, 0.0, "penalty_freq must be finite"),
    (1.0, 0.0, -math.inf, "penalty_present must be finite"),
])
def test_sampler_init_refusals(repeat: float, freq: float, present: float, msg: str) -> None:
    assert msg in SAMPLING and "Failed to initialize samplers: " in (SRC / "tools/server/server-context.cpp").read_text()
    with pytest.raises(ValueError) as ei:
        Sampler(Params(penalty_repeat=repeat, penalty_freq=freq, penalty_present=present))
    assert str(ei.value) == "Failed to initialize samplers: " + msg


def test_clamps_and_conversions() -> None:
    p = Params.from_request({"top_k": -1, "top_p": 1.5, "min_p": -0.5, "temperature": -2, "mirostat": 7,
                             "xtc_probability": 2, "xtc_threshold": -1, "adaptive_target": 3, "seed": -1,
                             "typical_p": 1e300, "dry_base": 0.5, "top_n_sigma": None})
    assert (p.top_k, p.top_p, p.min_p, p.temp, p.mirostat) == (0, 1.0, 0.0, 0.0, 2)
    assert (p.xtc_probability, p.xtc_threshold, p.adaptive_target, p.seed) == (1.0, 0.0, 1.0, 0xFFFFFFFF)
    assert p.typ_p == float(np.finfo(np.float32).max) and p.dry_base == f32(1.75) and p.top_n_sigma == -1.0
    assert Params.from_request({"top_k": 40.9, "seed": 42.7}).top_k == 40
    assert Params.from_request({"samplers": "kpxz"}).samplers == ("top_k", "top_p", "xtc")
    assert Params.from_request({"samplers": 5}).samplers == DEFAULT_SAMPLERS


def test_logit_bias_forms() -> None:
    from constrained.vocab import Vocabulary
    v = Vocabulary([b"a", b"b", b"c", b"ab"], eog_ids=[2], tokenizer=lambda t, s: [3] if t == b"ab" else [0])
    p = Params.from_request({"logit_bias": [[1, 2.5], [7, 1.0], [-1, 1.0], ["ab", False], [0, True], [0], "x",
                                            [1.0, 3.0]]}, vocab=v)
    assert p.logit_bias == ((1, 2.5), (3, -math.inf))
    p = Params.from_request({"logit_bias": {"1": -1, " 2": 0.5, "ab": 1, "": 2, "9": 1, "0": True}}, vocab=v)
    assert p.logit_bias == ((1, -1.0), (2, 0.5), (3, 1.0), (0, 2.0))
    assert "logit_bias" in SCHEMA and "strtol(el.key().c_str(), &end, 10)" in SCHEMA


def test_ollama() -> None:
    p = Params.from_ollama({"temperature": 0.2, "top_k": 5, "repeat_penalty": 1.2, "num_ctx": 2048})
    assert (p.temp, p.top_k, p.penalty_repeat) == (f32(0.2), 5, f32(1.2))
    with pytest.raises(ValueError, match="unknown Ollama option\\(s\\): bogus, zz"):
        Params.from_ollama({"zz": 1, "bogus": 2, "top_p": 0.5})


def test_strtof_matches_libc() -> None:
    cxx = pytest.importorskip("oracle.sampler_cxx")
    rng = np.random.default_rng(0)
    samples = ["0.950000", "0.100000", "1e-45", "3.4028235e38", "3.5e38", "-0.0", "12abc", "abc", " 7", ".5",
               "0.123457", "16777217", "1.00000005960464477539062"]
    samples += [f"{x:.6f}" for x in rng.standard_normal(300) * 10]
    samples += [repr(float(x)) for x in rng.standard_normal(300)]
    for s in samples:
        assert strtof(s) == cxx.c_strtof(s) or (math.isnan(strtof(s)[0]) and math.isnan(cxx.c_strtof(s)[0])), s


def _gguf_with_sampling(tmp_path, kv: dict) -> str:  # noqa: ANN001
    from gguf import GGUFReader, GGUFValueType, GGUFWriter

    from oracle.sdist import vocab_gguf
    src = GGUFReader(str(vocab_gguf("llama-spm")))
    arch = bytes(src.fields["general.architecture"].parts[-1]).decode()
    out = tmp_path / "with-sampling.gguf"
    w = GGUFWriter(str(out), arch)
    for name, f in src.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        t = f.types[0]
        sub = f.types[1] if t == GGUFValueType.ARRAY else None
        w.add_key_value(name, f.contents(), t, sub)
    for k, (val, t) in kv.items():
        w.add_key_value("general.sampling." + k, val, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(out)


def test_from_gguf_matches_llama(tmp_path) -> None:  # noqa: ANN001
    pytest.importorskip("llama_cpp")
    import ctypes

    from gguf import GGUFValueType as T

    from constrained.vocab.gguf_meta import sampling_metadata
    from oracle.llama import L, vocab_model
    kv = {"top_k": (17, T.INT32), "top_p": (f32(0.1234567), T.FLOAT32), "min_p": (f32(3e-7), T.FLOAT32),
          "temp": (f32(0.7), T.FLOAT32), "penalty_last_n": (-1, T.INT32), "penalty_repeat": (1.1, T.FLOAT64),
          "mirostat": (2, T.UINT32), "mirostat_tau": ("4.5xyz", T.STRING), "mirostat_eta": ("", T.STRING),
          "sequence": ("top_k;TEMP;bogus;min-p", T.STRING), "xtc_threshold": (True, T.BOOL)}
    path = _gguf_with_sampling(tmp_path, kv)
    p = Params.from_gguf(sampling_metadata(path))
    vm = vocab_model(path)
    buf = ctypes.create_string_buffer(600)
    for key, attr in (("top_k", "top_k"), ("top_p", "top_p"), ("min_p", "min_p"), ("temp", "temp"),
                      ("penalty_last_n", "penalty_last_n"), ("penalty_repeat", "penalty_repeat"),
                      ("mirostat", "mirostat"), ("mirostat_tau", "mirostat_tau")):
        n = L.llama_model_meta_val_str(vm.model, f"general.sampling.{key}".encode(), buf, len(buf))
        assert n > 0, key
        text = buf.value.decode()
        if isinstance(getattr(p, attr), int):
            assert getattr(p, attr) == int(re.match(r"\s*[+-]?\d+", text).group()), key
        else:
            assert getattr(p, attr) == strtof(text)[0], key
    assert p.mirostat_eta == Params().mirostat_eta  # empty string: not applied
    assert p.xtc_threshold == Params().xtc_threshold  # "true" does not parse as a float
    assert p.samplers == ("top_k", "temperature", "min_p")
    assert p.top_p == f32(0.123457)   # through std::to_string's 6 decimals
    assert Params.from_gguf(sampling_metadata(path), user_set=frozenset({"top_k", "samplers"})).top_k == 40
