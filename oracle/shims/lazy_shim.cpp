// Oracle shim for lazy grammars: llama.cpp's own trigger search (llama_grammar_trigger_pattern::find, compiled into
// libllama with std::regex ECMAScript) and its lazy grammar sampler, with the C++ exceptions it throws caught here
// (they would otherwise terminate the process), plus a read of the sampler's awaiting_trigger flag.
#include <cstring>
#include <exception>
#include <regex>
#include <string>

#include "llama.h"
#include "llama-grammar.h"

// the layout of llama-sampler.cpp's private `struct llama_sampler_grammar`
struct shim_grammar_ctx {
    const llama_vocab * vocab;
    std::string grammar_str;
    std::string grammar_root;
    llama_grammar * grammar;
};

static void put_error(const char * what, char * err, size_t err_len) {
    if (err && err_len) {
        std::strncpy(err, what, err_len - 1);
        err[err_len - 1] = 0;
    }
}

extern "C" {

// std::regex(pattern) then llama.cpp's find on input. 0: done (*start = -1 when nothing matches); 1: the pattern
// does not compile (std::regex_error, message in err); 2: another exception while searching.
int lazy_regex_find(const char * pat, size_t pat_len, const char * in, size_t in_len, long long * start,
                    char * err, size_t err_len) {
    llama_grammar_trigger_pattern tp;
    tp.pattern = std::string(pat, pat_len);
    try {
        tp.regex = std::regex(tp.pattern);
    } catch (const std::regex_error & e) {
        put_error(e.what(), err, err_len);
        return 1;
    }
    try {
        size_t s = tp.find(std::string(in, in_len));
        *start = s == std::string::npos ? -1 : (long long) s;
    } catch (const std::exception & e) {
        put_error(e.what(), err, err_len);
        return 2;
    }
    return 0;
}

// llama_sampler_init_grammar_lazy_patterns with std::regex_error caught (NULL and the message)
llama_sampler * lazy_sampler_init(const llama_vocab * vocab, const char * gbnf, const char * root,
                                  const char ** patterns, size_t n_patterns, const llama_token * tokens,
                                  size_t n_tokens, char * err, size_t err_len) {
    try {
        return llama_sampler_init_grammar_lazy_patterns(vocab, gbnf, root, patterns, n_patterns, tokens, n_tokens);
    } catch (const std::exception & e) {
        put_error(e.what(), err, err_len);
        return nullptr;
    }
}

// llama_sampler_accept; 0 done, 1 llama.cpp threw (message in err)
int lazy_sampler_accept(llama_sampler * smpl, llama_token token, char * err, size_t err_len) {
    try {
        llama_sampler_accept(smpl, token);
    } catch (const std::exception & e) {
        put_error(e.what(), err, err_len);
        return 1;
    }
    return 0;
}

// 1 while the grammar waits for its trigger, 0 after, -1 without a grammar
int lazy_sampler_awaiting(llama_sampler * smpl) {
    auto * ctx = (shim_grammar_ctx *) smpl->ctx;
    if (!ctx || !ctx->grammar) {
        return -1;
    }
    return ctx->grammar->awaiting_trigger ? 1 : 0;
}

// number of stacks of the grammar (after the trigger)
long long lazy_sampler_n_stacks(llama_sampler * smpl) {
    auto * ctx = (shim_grammar_ctx *) smpl->ctx;
    return ctx && ctx->grammar ? (long long) ctx->grammar->stacks.size() : -1;
}

}
