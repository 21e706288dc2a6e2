#include "command_line.hpp"

#include "docs_path.hpp"

#include <cstdio>
#include <memory>
#include <vector>

namespace gpuguard::cli {

namespace {

std::string option_name(const usage_words& words, const std::string& name) {
  return words.quote_option_names ? "option '" + name + "'" : name;
}

// The spelling the user gave for `option` ("-o" or "--output"), the last one in argv.
std::string spelling(const CLI::App& app, const std::string& name, const std::vector<std::string>& args) {
  const CLI::Option* option = app.get_option_no_throw(name);
  if (option == nullptr) { return name; }
  for (auto arg = args.rbegin(); arg != args.rend(); ++arg) {
    std::string bare = arg->substr(0, arg->find('='));
    if (bare.size() > 1 && bare[0] == '-' && option->check_name(bare)) { return bare; }
  }
  return name;
}

}  // namespace

void describe_command(CLI::App& app, const command_help& help) {
  app.name(std::string("gpuguard ") + help.words.command);
  app.description(help.description);
  app.formatter(std::make_shared<usage_formatter>(help.usage_line));
  app.set_help_flag("-h,--help", "this help");
  app.footer(help.footer + docs_line(help.doc_page));
}

int usage_error(const usage_words& words, const std::string& message) {
  std::fprintf(stderr, "gpuguard %s: %s", words.command, message.c_str());
  if (words.see_help) { std::fprintf(stderr, " (see 'gpuguard %s --help')", words.command); }
  std::fputc('\n', stderr);
  return 2;
}

std::optional<int> parse_command_line(CLI::App& app, const usage_words& words, int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i] != nullptr ? argv[i] : "";
    if (arg.size() > 3 && arg.compare(0, 2, "--") == 0 && arg.back() == '=' && arg.find('=') == arg.size() - 1) {
      arg.pop_back();
      args.push_back(arg);
      args.emplace_back();
      continue;
    }
    args.push_back(std::move(arg));
  }
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them last first
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ExtrasError&) {
    const std::vector<std::string> extra = app.remaining();
    const std::string first = extra.empty() ? std::string() : extra.front();
    if (first.size() > 1 && first[0] == '-') { return usage_error(words, "unknown option '" + first + "'"); }
    return usage_error(words, "unexpected argument '" + first + "'");
  } catch (const CLI::ArgumentMismatch& e) {
    // CLI11 names the option first: "--grace: 1 required SECONDS missing", "--json was given a
    // disallowed flag override", "--output: At Most 1 required but received 2".
    const std::string what = e.what();
    const std::string name = what.substr(0, what.find_first_of(": "));
    const std::string given = option_name(words, spelling(app, name.rfind('-', 0) == 0 ? name : "--" + name, args));
    if (what.find(" missing") != std::string::npos) { return usage_error(words, given + " needs a value"); }
    if (what.find("flag override") != std::string::npos) { return usage_error(words, given + " takes no value"); }
    if (what.find("At Most") != std::string::npos) { return usage_error(words, given + " given twice"); }
    return usage_error(words, what);
  } catch (const CLI::ParseError& e) {
    return usage_error(words, e.what());
  }
  return std::nullopt;
}

}  // namespace gpuguard::cli
