// A C ABI over llama.cpp's chat-template rendering, for the oracle tests of constrained.chat's jinja environment
// and of chat requests with tools (oracle/render.py).
//
// render_shim(template, bos, eos, inputs_json) renders one template with llama.cpp's jinja engine and exactly the
// given inputs, nothing rewritten: common_chat_template_direct_apply_impl (chat.cpp:905-966) with the messages as
// an override (so messages_inp_normalizer leaves them alone); inputs_json is {"messages", "tools" (optional),
// "add_generation_prompt", "enable_thinking", "extra_context" (optional object)}.
//
// chat_apply_shim(template, bos, eos, body_json) builds the prompt llama-server builds for a chat request with
// tools (oaicompat_chat_params_parse, server-common.cpp:1312-1385, with llama-server's defaults: preserve_reasoning
// "true" (arg.cpp:961), enable_thinking the template's support for it, a final assistant message continued):
// body_json is {"messages", "tools", "tool_choice" (optional), "parallel_tool_calls" (optional)}; the inputs go to
// common_chat_templates_apply as llama-server gives them.
//
// chat_parse_body_shim(template, body_json, texts_json) builds the same chat params for a request (also
// "chat_template_kwargs": {"enable_thinking": bool} and "reasoning_format") and parses each [text, is_partial] of
// texts_json as common_chat_parse does for the server (generation_prompt + text, lenient): an array of
// {"ok": true, "msg": <to_json_oaicompat>} or {"ok": false, "error"} (a setup error: one {"error"} object).
//
// chat_apply_model_shim(gguf_path, body_json) is chat_apply_shim with a GGUF's own templates (loaded vocab-only).
//
// All answer a malloc'ed JSON ({"prompt"} or {"error"} for the first two), freed with render_free.

#include "chat-auto-parser.h"
#include "chat.h"
#include "json.h"
#include "llama.h"

#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>

std::string common_chat_template_direct_apply_impl(const common_chat_template & tmpl,
                                                   const autoparser::generation_params & inputs,
                                                   const std::optional<common_json> & messages_override,
                                                   const std::optional<common_json> & tools_override,
                                                   const std::optional<common_json> & additional_context);

static char * dup_string(const std::string & s) {
    char * p = static_cast<char *>(std::malloc(s.size() + 1));
    std::memcpy(p, s.data(), s.size());
    p[s.size()] = '\0';
    return p;
}

extern "C" char * render_shim(const char * src, const char * bos, const char * eos, const char * inputs_json) {
    common_json out;
    try {
        common_chat_template tmpl(src, bos, eos);
        auto in = common_json::parse(inputs_json);
        autoparser::generation_params params;
        params.messages              = in.at("messages");
        params.tools                 = in.value("tools", common_json());
        params.add_generation_prompt = in.value("add_generation_prompt", false);
        params.enable_thinking       = in.value("enable_thinking", true);
        params.extra_context         = in.value("extra_context", common_json::object());
        out["prompt"] = common_chat_template_direct_apply_impl(tmpl, params, params.messages, std::nullopt,
                                                               std::nullopt);
    } catch (const std::exception & e) {
        out["error"] = e.what();
    }
    return dup_string(out.dump());
}

// (chat_apply_shim answers prompt, thinking tags, generation_prompt, grammar, grammar_lazy, preserved_tokens and
// grammar_triggers [{type, value}])
// the inputs oaicompat_chat_params_parse makes of body (server-common.cpp:1312-1372), llama-server's defaults
static common_chat_templates_inputs server_inputs(const common_chat_templates * tmpls, const common_json & body) {
    auto caps = common_chat_templates_get_caps(tmpls);
    common_chat_templates_inputs in;
    in.messages              = common_chat_msgs_parse_oaicompat(body.at("messages"));
    in.tools                 = common_chat_tools_parse_oaicompat(body.value("tools", common_json::array()));
    in.tool_choice           = common_chat_tool_choice_parse_oaicompat(body.value("tool_choice", std::string("auto")));
    in.parallel_tool_calls   = body.value("parallel_tool_calls", caps["supports_parallel_tool_calls"]);
    in.use_jinja             = true;
    in.add_generation_prompt = true;
    in.reasoning_format      = common_reasoning_format_from_name(body.value("reasoning_format", std::string("deepseek")));
    in.enable_thinking       = common_chat_templates_support_enable_thinking(tmpls);
    in.chat_template_kwargs["preserve_reasoning"] = "true";
    if (!in.messages.empty() && in.messages.back().role == "assistant") {
        in.continue_final_message = COMMON_CHAT_CONTINUATION_AUTO;
        in.add_generation_prompt  = false;
    }
    if (body.contains("json_schema")) {
        in.json_schema = body.at("json_schema").dump();
    }
    auto kwargs = body.value("chat_template_kwargs", common_json::object());
    if (kwargs.contains("enable_thinking")) {
        in.enable_thinking = kwargs.at("enable_thinking").get<bool>();
        in.chat_template_kwargs["enable_thinking"] = kwargs.at("enable_thinking").dump();
    }
    return in;
}

extern "C" char * chat_apply_shim(const char * src, const char * bos, const char * eos, const char * body_json) {
    common_json out;
    try {
        auto body  = common_json::parse(body_json);
        auto tmpls = common_chat_templates_init(nullptr, src, bos, eos);
        auto params = common_chat_templates_apply(tmpls.get(), server_inputs(tmpls.get(), body));
        out["prompt"] = params.prompt;
        out["thinking_start_tag"] = params.thinking_start_tag;      // what the reasoning budget is built from
        out["thinking_end_tags"]  = params.thinking_end_tags;
        out["generation_prompt"]  = params.generation_prompt;
        out["grammar"]            = params.grammar;
        out["grammar_lazy"]       = params.grammar_lazy;
        out["preserved_tokens"]   = params.preserved_tokens;
        auto triggers = common_json::array();
        for (const auto & t : params.grammar_triggers) {
            triggers.push_back({{"type", (int) t.type}, {"value", t.value}});
        }
        out["grammar_triggers"]   = triggers;
    } catch (const std::exception & e) {
        out["error"] = e.what();
    }
    return dup_string(out.dump());
}

// chat_apply_model_shim(gguf_path, body_json): chat_apply_shim for the templates of a GGUF (loaded vocab-only):
// common_chat_templates_init(model, "") picks its default and tool_use templates and BOS/EOS texts.
extern "C" char * chat_apply_model_shim(const char * gguf_path, const char * body_json) {
    common_json out;
    llama_model * model = nullptr;
    try {
        auto mp       = llama_model_default_params();
        mp.vocab_only = true;
        model = llama_model_load_from_file(gguf_path, mp);
        if (model == nullptr) {
            throw std::runtime_error(std::string("failed to load ") + gguf_path);
        }
        auto body  = common_json::parse(body_json);
        auto tmpls = common_chat_templates_init(model, "");
        out["prompt"] = common_chat_templates_apply(tmpls.get(), server_inputs(tmpls.get(), body)).prompt;
    } catch (const std::exception & e) {
        out["error"] = e.what();
    }
    if (model != nullptr) {
        llama_model_free(model);
    }
    return dup_string(out.dump());
}

extern "C" char * chat_parse_body_shim(const char * src, const char * body_json, const char * texts_json) {
    common_chat_parser_params pp;
    try {
        auto body   = common_json::parse(body_json);
        auto tmpls  = common_chat_templates_init(nullptr, src);
        auto in     = server_inputs(tmpls.get(), body);
        auto params = common_chat_templates_apply(tmpls.get(), in);
        pp = common_chat_parser_params(params);
        pp.reasoning_format = in.reasoning_format;
        if (!params.parser.empty()) {
            pp.parser.load(params.parser);
        }
    } catch (const std::exception & e) {
        common_json err;
        err["error"] = e.what();
        return dup_string(err.dump());
    }
    common_json out = common_json::array();
    for (const auto & pair : common_json::parse(texts_json)) {
        common_json r;
        try {
            auto msg = common_chat_parse(pair.at(0).get<std::string>(), pair.at(1).get<bool>(), pp);
            r["ok"]  = true;
            r["msg"] = msg.to_json_oaicompat();
        } catch (const std::exception & e) {
            r["ok"]    = false;
            r["error"] = e.what();
        }
        out.push_back(r);
    }
    return dup_string(out.dump());
}

extern "C" void render_free(char * p) {
    std::free(p);
}
