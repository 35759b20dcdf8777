// specula-cli: the engine without a GUI. Runs on machines with no Qt (the GPU machine).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>

#include "app/cli/commands.h"
#include "app/cli/eval_commands.h"
#include "app/cli/moe_commands.h"
#include "app/cli/profiler_commands.h"
#include "app/cli/sparse_commands.h"

namespace {

void add_speculation_flags(CLI::App* cmd, specula::cli::SpeculationArgs& spec) {
  cmd->add_option("--drafter", spec.drafter,
                  "Speculative drafter: none | ngram | layerskip | model | head | ngram+head (ngram's tree when it "
                  "matches, else the head's)")
      ->capture_default_str();
  cmd->add_option("--draft-model", spec.draft_model,
                  "Draft model for --drafter model (GGUF or HF directory; must share the target's tokenizer)");
  cmd->add_option(
      "--draft-head", spec.draft_head,
      "Draft head for --drafter head or ngram+head: a specula-draft-head safetensors file trained for the target "
      "(CPU backend only)");
  cmd->add_option("--tree", spec.tree, "Draft tree: chain:K | static:B1,B2,... | dynamic:DEPTH,TOPK,TOTAL")
      ->capture_default_str();
  cmd->add_option("--accept", spec.accept,
                  "Acceptance: greedy | sample | cascade:TAU (lossy); default greedy at temperature 0, else sample");
  cmd->add_option("--draft-backend", spec.draft_backend,
                  "Where layerskip and model drafts run: auto (the target's backend) | cpu | cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--layers", spec.layers,
                  "Layers the layerskip drafter runs: every-other | first:N | last:N | list:I,J,...")
      ->capture_default_str();
  cmd->add_option("--ngram-n", spec.ngram_n, "Longest suffix the ngram drafter matches")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--ngram-min", spec.ngram_min, "Shortest suffix the ngram drafter accepts as a match")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--ngram-max-length", spec.ngram_max_length, "Deepest ngram draft (0 = the tree's depth)")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  cmd->add_option("--ngram-min-confidence", spec.ngram_min_confidence,
                  "Draft an ngram token only while the estimated chance its path is accepted stays at least this "
                  "(0 = fill the tree)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--head-min-confidence", spec.head_min_confidence,
                  "Keep a head draft only while the head's probability of its path stays at least this "
                  "(0 = fill the tree)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--ngram-history", spec.ngram_history,
                  "Tokens of earlier prompts' answers the ngram drafter also matches against (0 = this sequence only)")
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  cmd->add_option("--sparse", spec.sparse,
                  "Sparse verification preset: strict | sa | sa-reuse | sffn | smoe | hybrid | ssv-exact | ssv-approx")
      ->capture_default_str();
  cmd->add_option("--sparse-config", spec.sparse_config,
                  "Sparse verification parameters as JSON (docs/sparse-verification.md)");
  cmd->add_flag("--no-controller", spec.no_controller,
                "Speculate every round (no break-even fallback to plain decoding)");
}

}  // namespace

int main(int argc, char** argv) {
  using specula::cli::GenerateArgs;
  CLI::App app{"specula-cli: speculative decoding with sparse verification, from the command line"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("specula-cli ") + SPECULA_VERSION);

  GenerateArgs gen;
  auto* generate = app.add_subcommand("generate", "Generate text from a prompt, streaming it, then print tokens/s");
  generate
      ->add_option("--model,-m", gen.model,
                   "GGUF file, Hugging Face directory, or 'default' (SmolLM2-135M-Instruct Q4_1)")
      ->capture_default_str();
  auto* prompt = generate->add_option("--prompt,-p", gen.prompt, "Prompt text");
  auto* prompt_file = generate->add_option("--prompt-file,-f", gen.prompt_file, "Read the prompt from a file");
  prompt->excludes(prompt_file);
  generate->add_flag("--chat", gen.chat, "Wrap the prompt in the model's chat template as a user turn");
  generate->add_option("--max-tokens,-n", gen.max_tokens, "Tokens to generate at most")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  generate->add_option("--temperature,-t", gen.temperature, "0 = greedy")
      ->check(CLI::Range(0.0f, 100.0f))
      ->capture_default_str();
  generate->add_option("--top-k", gen.top_k, "Keep the k most likely tokens (0 = off)")
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  generate->add_option("--top-p", gen.top_p, "Nucleus sampling mass, in (0, 1] (1 = off)")
      ->check(CLI::Range(1e-6f, 1.0f))
      ->capture_default_str();
  generate->add_option("--seed,-s", gen.seed, "Random seed for sampling")->capture_default_str();
  generate->add_option("--threads", gen.threads, "CPU threads (0 = all cores)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  generate->add_option("--kv-block-size", gen.kv_block_size, "Tokens per KV-cache block (8..128)")
      ->check(CLI::Range(8, 128))
      ->capture_default_str();
  generate->add_flag("--json", gen.json,
                     "Print one JSON object {text, tokens, timings, metrics} instead of streaming text");
  generate
      ->add_option("--precision", gen.precision,
                   "Target matmul activations: f32 (matches transformers to ~1e-6) | int8 (faster, ~1e-2 logit error)")
      ->check(CLI::IsMember({"f32", "int8"}))
      ->capture_default_str();
  generate
      ->add_option("--backend", gen.backend,
                   "Where the model runs: auto (cuda when a GPU is present and the run needs nothing CPU-only: int8, "
                   "exact block scoring, a shape the GPU kernels lack) | cpu | cuda; --draft-backend places "
                   "layerskip and model drafts")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  generate->add_option("--synthetic", gen.synthetic,
                       "Random bf16 weights of a known shape on the GPU, for timing only: llama-3.1-8b, "
                       "llama-3.1-70b, llama-3.1-405b, smollm2-135m, and the MoE shapes mixtral-8x7b, "
                       "qwen1.5-moe-a2.7b, olmoe-1b-7b");
  add_speculation_flags(generate, gen.spec);
  generate->add_option("--record", gen.record,
                       "Record the run into this session database (SQLite; open it in the app, export, diff)");
  generate
      ->add_option("--record-level", gen.record_level,
                   "What --record keeps: summary | full (adds per-query selections)")
      ->check(CLI::IsMember({"summary", "full"}))
      ->capture_default_str();
  generate->add_flag("--overwrite", gen.overwrite, "With --record: replace an existing session file");
  generate->add_flag("--shadow", gen.shadow,
                     "Also run plain decoding and report the first token where the outputs diverge");

  specula::cli::SpecbenchArgs bench;
  auto* specbench = app.add_subcommand(
      "specbench", "Spec-Bench style: per category, mean accepted length and speedup over plain decoding");
  specbench->add_option("--model,-m", bench.model, "Target model (GGUF, HF directory or 'default')")
      ->capture_default_str();
  specbench->add_option("--data", bench.data, "Spec-Bench jsonl (question_id, category, turns)")->required();
  specbench->add_option("--limit", bench.limit, "Items per category (0 = all)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  specbench->add_option("--max-tokens,-n", bench.max_tokens, "Tokens to generate per item at most")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  specbench->add_option("--precision", bench.precision, "Target matmul activations: f32 | int8")
      ->check(CLI::IsMember({"f32", "int8"}))
      ->capture_default_str();
  specbench->add_option("--threads", bench.threads, "CPU threads (0 = all cores)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  specbench->add_option("--kv-block-size", bench.kv_block_size, "Tokens per KV-cache block (8..128)")
      ->check(CLI::Range(8, 128))
      ->capture_default_str();
  specbench
      ->add_option("--backend", bench.backend,
                   "Where the target runs: auto (cuda when a GPU is present and the run needs nothing CPU-only) | "
                   "cpu | cuda; --draft-backend places layerskip and model drafts")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  specbench->add_flag("--json", bench.json, "Print the JSON report instead of the table");
  specbench->add_option("--out", bench.out, "Also write the JSON report to this file");
  add_speculation_flags(specbench, bench.spec);

  const specula::cli::EvalCommand eval(app, add_speculation_flags);

  std::string inspect_model;
  auto* inspect = app.add_subcommand("inspect", "Print architecture, hyper-parameters, tokenizer and tensor table");
  inspect->add_option("model", inspect_model, "GGUF file, Hugging Face directory, or 'default'")->required();

  std::string tok_model = "default", tok_text;
  bool tok_no_special = false;
  auto* tokenize = app.add_subcommand("tokenize", "Print the token ids and pieces of a text");
  tokenize->add_option("--model,-m", tok_model, "Model whose tokenizer to use")->capture_default_str();
  tokenize->add_option("text", tok_text, "Text to tokenize")->required();
  tokenize->add_flag("--no-special", tok_no_special, "Treat special-token text as plain text");

  const specula::cli::ProfilerCommands profiler_commands(app);
  const specula::cli::SparseCommands sparse_commands(app);
  const specula::cli::MoeCommands moe_commands(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "specula-cli: %s (see --help)\n", e.what());
    return 2;
  }

  try {
    if (*generate) {
      if (!gen.prompt && !gen.prompt_file) {
        std::fprintf(stderr, "specula-cli: generate needs --prompt TEXT or --prompt-file F\n");
        return 2;
      }
      return specula::cli::run_generate(gen);
    }
    if (auto code = profiler_commands.run()) return *code;
    if (auto code = sparse_commands.run()) return *code;
    if (auto code = moe_commands.run()) return *code;
    if (*specbench) return specula::cli::run_specbench(bench);
    if (eval.chosen()) return eval.run();
    if (*inspect) return specula::cli::run_inspect(inspect_model);
    if (*tokenize) return specula::cli::run_tokenize(tok_model, tok_text, !tok_no_special);
  } catch (const std::exception& e) {
    // The engine reports errors as values; this is the outermost guard (e.g. bad_alloc).
    std::fprintf(stderr, "specula-cli: %s\n", e.what());
    return 1;
  }
  return 0;
}
