// A C ABI over llama.cpp's JSON schema converter, for the oracle tests (oracle/schema.py).
//
// schema_shim_convert(text, force_gbnf, &out, &warnings) parses `text` with common_json::parse and calls
// json_schema_to_grammar(json, force_gbnf). It returns 0 with the grammar in *out, 1 with the message of a
// std::invalid_argument (the converter's own refusals), 2 with the message of any other std::exception (e.g. a
// JSON parse error), 3 for anything else. Whatever the converter printed to stderr (its "WARNING: ..." line) is
// returned in *warnings. Both strings are malloc'ed; release them with schema_shim_free.

#include "json-schema-to-grammar.h"
#include "json.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unistd.h>

static char * dup_string(const std::string & s) {
    char * p = static_cast<char *>(std::malloc(s.size() + 1));
    std::memcpy(p, s.data(), s.size());
    p[s.size()] = '\0';
    return p;
}

extern "C" int schema_shim_convert(const char * text, int force_gbnf, char ** out, char ** warnings) {
    // capture stderr in a temporary file for the duration of the call
    std::fflush(stderr);
    FILE * tmp = std::tmpfile();
    int saved = -1;
    if (tmp) {
        saved = dup(2);
        dup2(fileno(tmp), 2);
    }
    int status = 0;
    std::string result;
    try {
        result = json_schema_to_grammar(common_json::parse(text), force_gbnf != 0);
    } catch (const std::invalid_argument & e) {
        status = 1;
        result = e.what();
    } catch (const std::exception & e) {
        status = 2;
        result = e.what();
    } catch (...) {
        status = 3;
        result = "unknown exception";
    }
    std::string captured;
    if (tmp) {
        std::fflush(stderr);
        dup2(saved, 2);
        close(saved);
        std::rewind(tmp);
        char buf[4096];
        size_t n;
        while ((n = std::fread(buf, 1, sizeof(buf), tmp)) > 0) {
            captured.append(buf, n);
        }
        std::fclose(tmp);
    }
    *out = dup_string(result);
    *warnings = dup_string(captured);
    return status;
}

extern "C" void schema_shim_free(char * p) {
    std::free(p);
}
