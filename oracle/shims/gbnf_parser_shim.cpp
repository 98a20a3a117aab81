// llama.cpp's own GBNF parser (llama_grammar_parser::parse, exported by libllama) for the parser oracle tests:
// returns the symbol table and the flat rule vectors as text, so that they can be compared element for element.
// ``vocab`` (may be null) resolves <text> token references as in llama_sampler_init_grammar.
//
// Output (malloc'd, freed with gbnf_shim_free):
//   line 1: "1" if parse() returned true, else "0"
//   then one line per symbol: "S <id> <name>", then one line per rule: "R <type> <value> <type> <value> ..."

#include "llama-grammar.h"

#include <cstdlib>
#include <cstring>
#include <string>

extern "C" char * gbnf_shim_parse(const char * text, const llama_vocab * vocab) {
    llama_grammar_parser parser(vocab);
    bool ok = parser.parse(text);
    std::string out = ok ? "1\n" : "0\n";
    for (const auto & kv : parser.symbol_ids) {
        out += "S " + std::to_string(kv.second) + " " + kv.first + "\n";
    }
    for (const auto & rule : parser.rules) {
        out += "R";
        for (const auto & e : rule) {
            out += " " + std::to_string((int) e.type) + " " + std::to_string(e.value);
        }
        out += "\n";
    }
    char * buf = static_cast<char *>(std::malloc(out.size() + 1));
    std::memcpy(buf, out.c_str(), out.size() + 1);
    return buf;
}

extern "C" void gbnf_shim_free(char * p) {
    std::free(p);
}
