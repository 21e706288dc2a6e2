/// @file
/// @brief How the subcommands read their command lines: CLI11, with gpuguard's words and statuses.
///
/// Each subcommand describes itself in a `command_help`, builds a `CLI::App` from it
/// (`describe_command`; its options bound to its own struct, one-line descriptions, the long help
/// in the footer) and calls `parse_command_line`. CLI11's errors are said the way
/// gpuguard's usage errors always were ("unknown option '--x'", "option '-o' needs a value"), on
/// one line of stderr, and exit 2.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

namespace gpuguard::cli {

/// Help whose first line is the command's own usage line ("usage: gpuguard run [OPTIONS] ...").
class usage_formatter : public CLI::Formatter {
 public:
  explicit usage_formatter(std::string usage) : usage_(std::move(usage)) {}
  std::string make_usage(const CLI::App* /*app*/, std::string /*name*/) const override { return usage_ + "\n"; }
  std::string make_description(const CLI::App* app) const override {
    const std::string text = app->get_description();
    return text.empty() ? std::string() : "\n" + text + "\n";
  }
  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const override {
    // The usage line first, as a reader of `--help` expects, then what the command does.
    return make_usage(app, name) + make_description(app) + make_positionals(app) + make_groups(app, mode) +
           "\n" + make_footer(app);
  }

 private:
  std::string usage_;
};

/// The words of a usage error: `name` is the command ("run"), `style` how it names options.
struct usage_words {
  const char* command;              ///< "run": messages start "gpuguard run: "
  bool quote_option_names = true;   ///< "option '--grace' needs a value" (false: "--grace needs a value")
  bool see_help = false;            ///< end with " (see 'gpuguard run --help')"
};

/// What a subcommand says about itself, in one constant per command: its help (the usage line
/// first, what it does, the options, then the long help) and the words of its usage errors.
struct command_help {
  const char* usage_line;   ///< "usage: gpuguard run [OPTIONS] [--] CMD [ARGS...]"
  const char* description;  ///< what the command does, under the usage line
  const char* footer;       ///< details, environment, exit statuses: after the options
  usage_words words;
  const char* doc_page;     ///< the page of the installed docs that says more ("run.md")
};

/// Gives `app` the command's name ("gpuguard run"), description, footer (ending with where its
/// doc page is: docs_path.hpp), -h/--help, and a help that opens with the usage line. Call it
/// before adding the options; then parse_command_line(app, help.words, ...).
void describe_command(CLI::App& app, const command_help& help);

/// Says a usage error on stderr, one line, and returns 2.
int usage_error(const usage_words& words, const std::string& message);

/// Parses argv (argv[0] is the subcommand) into `app`. Returns nullopt to go on, 0 after printing
/// the help for -h/--help, or 2 after a usage error said on stderr. "--name=" is read as an empty
/// value (CLI11 alone reads it as a missing one), so that the command says what is wrong with it.
std::optional<int> parse_command_line(CLI::App& app, const usage_words& words, int argc, char** argv);

}  // namespace gpuguard::cli
