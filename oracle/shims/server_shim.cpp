// A C ABI over llama-server's own sampling code (common/sampling.cpp in libllama-common.so), for oracle tests.
// Our code, compiled by oracle/server.py against the llama.cpp sdist headers.
#include "sampling.h"
#include "common.h"

#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

extern "C" {

struct shim_params {
    uint32_t seed;
    int32_t n_prev, n_probs, min_keep, top_k;
    float top_p, min_p, xtc_probability, xtc_threshold, typ_p, temp, dynatemp_range, dynatemp_exponent;
    int32_t penalty_last_n;
    float penalty_repeat, penalty_freq, penalty_present, dry_multiplier, dry_base;
    int32_t dry_allowed_length, dry_penalty_last_n;
    float adaptive_target, adaptive_decay;
    int32_t mirostat;
    float top_n_sigma, mirostat_tau, mirostat_eta;
    const char * samplers;      // sampler letters (common_sampler_types_from_chars), NULL = default order
    const char * dry_breakers;  // breakers separated by '\x1f', NULL = default
    const char * grammar;       // GBNF, NULL or "" = none
    int32_t grammar_type;       // common_grammar_type
    const int32_t * bias_ids;
    const float * bias_vals;
    int32_t n_bias;
};

static void set_err(char * err, int errlen, const char * msg) {
    if (err && errlen > 0) {
        std::strncpy(err, msg, errlen - 1);
        err[errlen - 1] = 0;
    }
}

void * shim_init(const llama_model * model, const shim_params * p, char * err, int errlen) {
    try {
        common_params_sampling s;
        s.seed = p->seed; s.n_prev = p->n_prev; s.n_probs = p->n_probs; s.min_keep = p->min_keep;
        s.top_k = p->top_k; s.top_p = p->top_p; s.min_p = p->min_p;
        s.xtc_probability = p->xtc_probability; s.xtc_threshold = p->xtc_threshold; s.typ_p = p->typ_p;
        s.temp = p->temp; s.dynatemp_range = p->dynatemp_range; s.dynatemp_exponent = p->dynatemp_exponent;
        s.penalty_last_n = p->penalty_last_n; s.penalty_repeat = p->penalty_repeat;
        s.penalty_freq = p->penalty_freq; s.penalty_present = p->penalty_present;
        s.dry_multiplier = p->dry_multiplier; s.dry_base = p->dry_base;
        s.dry_allowed_length = p->dry_allowed_length; s.dry_penalty_last_n = p->dry_penalty_last_n;
        s.adaptive_target = p->adaptive_target; s.adaptive_decay = p->adaptive_decay;
        s.mirostat = p->mirostat; s.top_n_sigma = p->top_n_sigma;
        s.mirostat_tau = p->mirostat_tau; s.mirostat_eta = p->mirostat_eta;
        s.no_perf = true;
        if (p->samplers) {
            s.samplers = common_sampler_types_from_chars(p->samplers);
        }
        if (p->dry_breakers) {
            s.dry_sequence_breakers.clear();
            std::string all(p->dry_breakers), cur;
            for (char c : all) {
                if (c == '\x1f') { s.dry_sequence_breakers.push_back(cur); cur.clear(); } else { cur += c; }
            }
            s.dry_sequence_breakers.push_back(cur);
        }
        if (p->grammar && p->grammar[0]) {
            s.grammar = common_grammar((common_grammar_type) p->grammar_type, std::string(p->grammar));
        }
        for (int i = 0; i < p->n_bias; ++i) {
            s.logit_bias.push_back({p->bias_ids[i], p->bias_vals[i]});
        }
        return common_sampler_init(model, s);
    } catch (const std::exception & e) {
        set_err(err, errlen, e.what());
        return nullptr;
    }
}

// -1 on an exception (message in err); else the token
int32_t shim_sample(void * s, llama_context * ctx, int idx, char * err, int errlen) {
    try {
        return common_sampler_sample((common_sampler *) s, ctx, idx, false);
    } catch (const std::exception & e) {
        set_err(err, errlen, e.what());
        return -1;
    }
}

int shim_accept(void * s, int32_t token, int is_generated, char * err, int errlen) {
    try {
        common_sampler_accept((common_sampler *) s, token, is_generated != 0);
        return 0;
    } catch (const std::exception & e) {
        set_err(err, errlen, e.what());
        return 1;
    }
}

// The last candidate array (after the redraw, if one happened), as the server reads it for post-sampling probs.
int32_t shim_candidates(void * s, int do_sort, llama_token_data ** data, int64_t * selected) {
    llama_token_data_array * a = common_sampler_get_candidates((common_sampler *) s, do_sort != 0);
    *data = a->data;
    *selected = a->selected;
    return (int32_t) a->size;
}

void shim_reset(void * s) { common_sampler_reset((common_sampler *) s); }
void shim_free(void * s) { common_sampler_free((common_sampler *) s); }
llama_sampler * shim_chain(void * s) { return common_sampler_get((common_sampler *) s); }
uint32_t shim_seed(void * s) { return common_sampler_get_seed((common_sampler *) s); }

}
