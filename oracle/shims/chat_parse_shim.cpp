// A C ABI over llama.cpp's chat parser, for the oracle tests of constrained.chat.peg
// (oracle/chat_parse.py).
//
// chat_parse_shim(template, tools_json, tool_choice, parallel, texts_json) builds the chat params llama-server
// builds for one user message with these tools (common_chat_templates_apply, --jinja, reasoning_format deepseek),
// loads the PEG parser it serialised, and parses each text as common_chat_parse does for the server
// (generation_prompt + text, lenient). Each result is {"ok": true, "msg": <to_json_oaicompat>,
// "generation_prompt": ...} or {"ok": false, "error": <what()>}; the malloc'ed JSON is freed with chat_parse_free.

#include "chat.h"
#include "json.h"

#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

static char * dup_string(const std::string & s) {
    char * p = static_cast<char *>(std::malloc(s.size() + 1));
    std::memcpy(p, s.data(), s.size());
    p[s.size()] = '\0';
    return p;
}

static std::string quote(const std::string & s) {
    return common_json(s).dump();
}

// texts_json: an array of [text, is_partial] pairs, all parsed with the same chat params; the answer is the array of
// their results. A setup error (bad tools, a template that cannot render) is one {"ok": false} object instead.
extern "C" char * chat_parse_shim(const char * tmpl, const char * tools_json, const char * tool_choice, int parallel,
                                  const char * texts_json) {
    common_chat_parser_params pp;
    std::string gen;
    try {
        auto tmpls = common_chat_templates_init(nullptr, tmpl);
        common_chat_templates_inputs in;
        common_chat_msg u;
        u.role    = "user";
        u.content = "Hi";
        in.messages            = {u};
        in.tools               = common_chat_tools_parse_oaicompat(common_json::parse(tools_json));
        in.tool_choice         = common_chat_tool_choice_parse_oaicompat(tool_choice);
        in.parallel_tool_calls = parallel != 0;
        in.use_jinja           = true;
        in.reasoning_format    = COMMON_REASONING_FORMAT_DEEPSEEK;
        auto params = common_chat_templates_apply(tmpls.get(), in);
        pp = common_chat_parser_params(params);
        pp.reasoning_format = COMMON_REASONING_FORMAT_DEEPSEEK;
        if (!params.parser.empty()) {
            pp.parser.load(params.parser);
        }
        gen = params.generation_prompt;
    } catch (const std::exception & e) {
        return dup_string("{\"ok\":false,\"error\":" + quote(e.what()) + "}");
    }
    auto texts = common_json::parse(texts_json);
    std::string out = "[";
    for (size_t i = 0; i < texts.size(); i++) {
        const auto & pair = texts.at(i);
        std::string r;
        try {
            auto msg = common_chat_parse(pair.at(0).get<std::string>(), pair.at(1).get<bool>(), pp);
            r = "{\"ok\":true,\"msg\":" + msg.to_json_oaicompat().dump() + ",\"generation_prompt\":" + quote(gen) + "}";
        } catch (const std::exception & e) {
            r = "{\"ok\":false,\"error\":" + quote(e.what()) + "}";
        }
        out += (i ? "," : "") + r;
    }
    return dup_string(out + "]");
}

extern "C" void chat_parse_free(char * p) {
    std::free(p);
}
