// A C ABI over llama.cpp's differential template analysis, for the oracle tests of constrained.chat.autoparser
// (oracle/autoparser.py).
//
// autoparser_shim(template, bos, eos) runs autoparser::analyze_template on the template (chat-diff-analyzer.cpp)
// and common_chat_templates_support_enable_thinking on the templates common_chat_templates_init builds from it;
// the answer is the malloc'ed JSON {"mode", "start", "end", "supports_thinking"} (or {"error"}), freed with
// autoparser_free.
//
// autoparser_apply_shim(template, bos, eos, messages_json) renders an OpenAI-style conversation as llama-server does
// for /apply-template with its defaults (oaicompat_chat_params_parse, server-common.cpp:1320-1380): a final
// assistant message is continued (COMMON_CHAT_CONTINUATION_AUTO, no generation prompt), enable_thinking is the
// template's support for it, the preserve_reasoning kwarg is "true" (arg.cpp:961), reasoning_format deepseek.
// The answer is {"prompt"} or {"error"}.

#include "chat-auto-parser.h"
#include "chat.h"
#include "json.h"

#include <cstdlib>
#include <cstring>
#include <exception>
#include <sstream>
#include <string>

static char * dup_string(const std::string & s) {
    char * p = static_cast<char *>(std::malloc(s.size() + 1));
    std::memcpy(p, s.data(), s.size());
    p[s.size()] = '\0';
    return p;
}

extern "C" char * autoparser_shim(const char * src, const char * bos, const char * eos) {
    common_json out;
    try {
        common_chat_template tmpl(src, bos, eos);
        autoparser::autoparser ap;
        ap.analyze_template(tmpl);
        std::ostringstream mode;
        mode << ap.reasoning.mode;
        out["mode"]  = mode.str();
        out["start"] = ap.reasoning.start;
        out["end"]   = ap.reasoning.end;
        auto tmpls = common_chat_templates_init(nullptr, src, bos, eos);
        out["supports_thinking"] = common_chat_templates_support_enable_thinking(tmpls.get());
    } catch (const std::exception & e) {
        out["error"] = e.what();
    }
    return dup_string(out.dump());
}

// autoparser_tools_shim(template, bos, eos): the whole analysis of analyze_template (reasoning, content, tools,
// user/assistant start markers, preserved tokens, additional stops), for constrained.chat.autoparser_tools.
extern "C" char * autoparser_tools_shim(const char * src, const char * bos, const char * eos) {
    common_json out;
    try {
        common_chat_template tmpl(src, bos, eos);
        autoparser::autoparser ap;
        ap.analyze_template(tmpl);
        auto str = [](auto v) { std::ostringstream o; o << v; return o.str(); };
        out["reasoning"] = {{"mode", str(ap.reasoning.mode)}, {"start", ap.reasoning.start}, {"end", ap.reasoning.end}};
        out["content"] = {{"mode", str(ap.content.mode)}, {"start", ap.content.start}, {"end", ap.content.end}};
        const auto & t = ap.tools;
        out["format"] = {{"mode", str(t.format.mode)}, {"section_start", t.format.section_start},
                         {"section_end", t.format.section_end}, {"per_call_start", t.format.per_call_start},
                         {"per_call_end", t.format.per_call_end}, {"fun_name_is_key", t.format.fun_name_is_key},
                         {"tools_array_wrapped", t.format.tools_array_wrapped},
                         {"openai_wrapper_trigger", t.format.openai_wrapper_trigger},
                         {"function_field", t.format.function_field}, {"name_field", t.format.name_field},
                         {"args_field", t.format.args_field}, {"id_field", t.format.id_field},
                         {"gen_id_field", t.format.gen_id_field}, {"parameter_order", t.format.parameter_order}};
        out["function"] = {{"name_prefix", t.function.name_prefix}, {"name_suffix", t.function.name_suffix},
                           {"args_separator", t.function.args_separator}, {"close", t.function.close}};
        out["arguments"] = {{"start", t.arguments.start}, {"end", t.arguments.end},
                            {"name_prefix", t.arguments.name_prefix}, {"name_suffix", t.arguments.name_suffix},
                            {"value_prefix", t.arguments.value_prefix}, {"value_suffix", t.arguments.value_suffix},
                            {"separator", t.arguments.separator},
                            {"tolerate_intertag_whitespace", t.arguments.tolerate_intertag_whitespace}};
        out["call_id"] = {{"pos", str(t.call_id.pos)}, {"prefix", t.call_id.prefix}, {"suffix", t.call_id.suffix}};
        out["user_start"] = ap.user_start;
        out["assistant_start"] = ap.assistant_start;
        out["preserved_tokens"] = ap.preserved_tokens;
        out["additional_stops"] = ap.additional_stops;
        out["supports_tool_calls"] = ap.jinja_caps.supports_tool_calls;
    } catch (const std::exception & e) {
        out["error"] = e.what();
    }
    return dup_string(out.dump());
}

extern "C" char * autoparser_apply_shim(const char * src, const char * bos, const char * eos,
                                        const char * messages_json) {
    common_json out;
    try {
        auto tmpls = common_chat_templates_init(nullptr, src, bos, eos);
        common_chat_templates_inputs in;
        in.messages = common_chat_msgs_parse_oaicompat(common_json::parse(messages_json));
        in.use_jinja = true;
        in.reasoning_format = COMMON_REASONING_FORMAT_DEEPSEEK;
        in.enable_thinking = common_chat_templates_support_enable_thinking(tmpls.get());
        in.chat_template_kwargs["preserve_reasoning"] = "true";
        if (!in.messages.empty() && in.messages.back().role == "assistant") {
            in.continue_final_message = COMMON_CHAT_CONTINUATION_AUTO;
            in.add_generation_prompt  = false;
        }
        out["prompt"] = common_chat_templates_apply(tmpls.get(), in).prompt;
    } catch (const std::exception & e) {
        out["error"] = e.what();
    }
    return dup_string(out.dump());
}

extern "C" void autoparser_free(char * p) {
    std::free(p);
}
