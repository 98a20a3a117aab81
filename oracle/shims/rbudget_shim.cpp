// Oracle shim for the reasoning-budget sampler: libllama-common's own common_reasoning_budget_init / apply / accept /
// force / get_state / get_end_match, driven by a JSON script, for tests/sampler/test_reasoning_budget.py.
//
// rbudget_run(json) takes {"vocab": path or "", "n_vocab": N, "start": [[ids]], "end": [[ids]...], "forced": [ids],
// "budget": B, "initial": state, "steps": [token id, or -1 for common_reasoning_budget_force, or -2 for a reset]}
// and returns, per step, {"kept": the one id apply leaves on an all-zero array of N candidates (-1: all kept),
// "state": the state after the step, "end_match": the end sequence or null, "forced": force()'s result}.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "llama.h"
#include "reasoning-budget.h"

using json = nlohmann::ordered_json;

static const llama_vocab * vocab_for(const std::string & path) {
    static std::map<std::string, llama_model *> models;
    if (path.empty()) {
        return nullptr;
    }
    auto it = models.find(path);
    if (it == models.end()) {
        llama_model_params mp = llama_model_default_params();
        mp.vocab_only = true;
        llama_model * m = llama_model_load_from_file(path.c_str(), mp);
        it = models.emplace(path, m).first;
    }
    return it->second ? llama_model_get_vocab(it->second) : nullptr;
}

extern "C" {

char * rbudget_run(const char * in) {
    json out = json::array();
    try {
        json j = json::parse(in);
        const llama_vocab * vocab = vocab_for(j.value("vocab", std::string()));
        std::vector<llama_tokens> start = j.at("start").get<std::vector<llama_tokens>>();
        std::vector<llama_tokens> end = j.at("end").get<std::vector<llama_tokens>>();
        llama_tokens forced = j.at("forced").get<llama_tokens>();
        int n_vocab = j.at("n_vocab").get<int>();
        llama_sampler * s = common_reasoning_budget_init(vocab, start, end, forced, j.at("budget").get<int>(),
                                                         (common_reasoning_budget_state) j.value("initial", 0));
        std::vector<llama_token_data> cur(n_vocab);
        for (const auto & step : j.at("steps")) {
            int tok = step.get<int>();
            json r = json::object();
            for (int i = 0; i < n_vocab; i++) {
                cur[i] = llama_token_data{i, 0.0f, 0.0f};
            }
            llama_token_data_array arr{cur.data(), (size_t) n_vocab, -1, false};
            llama_sampler_apply(s, &arr);
            int n_finite = 0, kept = -1;
            for (int i = 0; i < n_vocab; i++) {
                if (std::isfinite(cur[i].logit)) {
                    n_finite++;
                    kept = i;
                }
            }
            r["kept"] = n_finite == n_vocab ? -1 : (n_finite == 1 ? kept : -3);
            if (tok == -1) {
                r["forced"] = common_reasoning_budget_force(s);
            } else if (tok == -2) {
                llama_sampler_reset(s);
            } else {
                llama_sampler_accept(s, tok);
            }
            r["state"] = (int) common_reasoning_budget_get_state(s);
            const llama_tokens * m = common_reasoning_budget_get_end_match(s);
            r["end_match"] = m ? json(*m) : json(nullptr);
            out.push_back(r);
        }
        llama_sampler_free(s);
    } catch (const std::exception & e) {
        out = json{{"error", e.what()}};
    }
    std::string text = out.dump();
    char * p = (char *) std::malloc(text.size() + 1);
    std::memcpy(p, text.c_str(), text.size() + 1);
    return p;
}

void rbudget_free(char * p) { std::free(p); }
}
