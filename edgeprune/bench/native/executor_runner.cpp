// An ExecuTorch runner built from the libraries of the `executorch` wheel alone (no torch, no Python at
// run time): how an app on a board loads and runs a .pte. `edgeprune devices setup` compiles it on the
// board with the board's g++ against the wheel's headers and libraries, at the host's executorch version.
//
// Its command line and log lines are those of ExecuTorch's examples/portable/executor_runner, so that the
// parser for that tool (edgeprune/bench/native/executor_runner.py) reads both:
//   --model_path=F --num_executions=N --cpu_threads=T --inputs=a.bin,b.bin
// Inputs are raw little-endian tensors in call order, with the shapes and dtypes of the program's own
// input metadata. Raw files carry no shape, so a file holding fewer elements than an input's upper bound (a
// dynamic-shape program: a generator's decode step of one token) is sized by its first dimension larger than 1,
// the token dimension of edgeprune's generators: [1, 16] with one token's bytes runs as [1, 1].
// Two additions: --output_dir=D writes every output tensor as output_<i>.bin (raw, the
// output's dtype) after the last execution, and --list_backends prints the backends and kernel count that
// registered when the libraries loaded (what setup checks).
//
// A KV-cached generator (a causal-lm fit's .pte: forward(input_ids [1, S], cache_position [S]) -> logits
// [1, S, vocab], its cache kept in the program between calls) is run as an app runs it with
// --generate=N --prompt=ids.bin (raw little-endian int64 token ids): prefill the prompt in chunks of the
// program's get_max_seq_len, then N greedy decode steps of one token, stopping at an id of get_eos_ids unless
// --ignore_eos. --num_executions repeats the whole generation from position 0. Per execution it prints
//   Generation i of N: prefill P tokens in X ms, decode D tokens in Y ms
// (the first new token comes from the prefill's logits; D counts the decode steps after it), then
//   Tokens: t1 t2 ...
// from the last execution.
//
// We write our own rather than build upstream's: that one needs ExecuTorch's source tree and CMake build,
// and PyPI ships only the wheel's prebuilt libraries and headers.

#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>
#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/kernel/operator_registry.h>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

// The wheel ships no header for the thread pool; this is the part of
// extension/threadpool/threadpool.h the runner calls (sized before a program loads, as upstream does).
namespace executorch::extension::threadpool {
class ThreadPool {
 public:
  bool _unsafe_reset_threadpool(uint32_t num_threads);
};
ThreadPool* get_threadpool();
}  // namespace executorch::extension::threadpool

using executorch::aten::ScalarType;
using executorch::extension::TensorPtr;
using executorch::extension::module::Module;
using executorch::runtime::Error;
using executorch::runtime::EValue;

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

bool flag(const std::string& arg, const std::string& name, std::string* value) {
  const std::string prefix = "--" + name + "=";
  if (arg.rfind(prefix, 0) != 0) return false;
  *value = arg.substr(prefix.size());
  return true;
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(separator, start);
    if (end == std::string::npos) end = text.size();
    if (end > start) parts.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

std::string error_code(Error error) {  // as ExecuTorch's runtime/core/error.h lists them: hexadecimal
  char text[16];
  std::snprintf(text, sizeof(text), "0x%x", static_cast<unsigned>(error));
  return text;
}

int fail(const std::string& message) {
  std::fprintf(stderr, "executor_runner: %s\n", message.c_str());
  return 1;
}

bool read_file(const std::string& path, std::vector<char>* bytes) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return false;
  bytes->assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
  return true;
}

// Sizes an input whose file holds fewer elements than its upper bound (see the file's head): the first dimension
// larger than 1 shrinks to what the bytes hold. False when no such size fits them exactly.
bool fit_first_dimension(std::vector<executorch::aten::SizesType>* sizes, size_t bound_bytes, size_t bytes) {
  size_t elements = 1;
  for (const auto size : *sizes) elements *= static_cast<size_t>(size);
  if (elements == 0 || bound_bytes % elements != 0 || bytes == 0 || bytes >= bound_bytes) return false;
  const size_t element_bytes = bound_bytes / elements;
  for (auto& size : *sizes) {
    if (size <= 1) continue;
    const size_t rest = elements / static_cast<size_t>(size) * element_bytes;
    if (bytes % rest != 0) return false;
    size = static_cast<executorch::aten::SizesType>(bytes / rest);
    return true;
  }
  return false;
}

// The integers a constant method (no inputs) returns, or none when the program has no such method.
std::vector<int64_t> constants(Module& module, const std::string& name) {
  std::vector<int64_t> values;
  auto names = module.method_names();
  if (!names.ok() || names->count(name) == 0) return values;
  auto result = module.execute(name);
  if (!result.ok()) return values;
  for (const auto& value : *result) {
    if (value.isInt()) values.push_back(value.toInt());
    if (value.isBool()) values.push_back(value.toBool() ? 1 : 0);
  }
  return values;
}

// Logits of `tokens` at positions start.. (one forward); the greedy id of the last row, or -1 on failure.
int64_t forward_argmax(Module& module, std::vector<int64_t> tokens, int64_t start, std::string* error) {
  const auto count = static_cast<executorch::aten::SizesType>(tokens.size());
  std::vector<int64_t> positions(tokens.size());
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = start + static_cast<int64_t>(i);
  auto ids = executorch::extension::from_blob(tokens.data(), {1, count}, ScalarType::Long);
  auto cache_position = executorch::extension::from_blob(positions.data(), {count}, ScalarType::Long);
  auto result = module.forward({EValue(ids), EValue(cache_position)});
  if (!result.ok() || result->empty() || !(*result)[0].isTensor()) {
    *error = "forward of " + std::to_string(count) + " tokens at position " + std::to_string(start) +
             " failed with error " + (result.ok() ? std::string("(no logits)") : error_code(result.error()));
    return -1;
  }
  const auto& logits = (*result)[0].toTensor();
  if (logits.scalar_type() != ScalarType::Float || logits.dim() != 3 || logits.size(1) != count) {
    *error = "forward did not return float logits [1, " + std::to_string(count) + ", vocab]";
    return -1;
  }
  const int64_t vocab = logits.size(2);
  const float* row = logits.const_data_ptr<float>() + (count - 1) * vocab;
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i) {
    if (row[i] > row[best]) best = i;
  }
  return best;
}

// Prefill `prompt`, then greedy decode up to `new_tokens` tokens (see the file's head), `executions` times.
int generate(Module& module, const std::string& prompt_path, long new_tokens, long executions, bool ignore_eos) {
  std::vector<char> bytes;
  if (!read_file(prompt_path, &bytes)) return fail("cannot read " + prompt_path);
  if (bytes.empty() || bytes.size() % sizeof(int64_t) != 0) {
    return fail(prompt_path + " has " + std::to_string(bytes.size()) + " bytes: expected int64 token ids");
  }
  std::vector<int64_t> prompt(bytes.size() / sizeof(int64_t));
  std::memcpy(prompt.data(), bytes.data(), bytes.size());
  const auto chunk = constants(module, "get_max_seq_len");
  const auto context = constants(module, "get_max_context_len");
  const auto kv_cache = constants(module, "use_kv_cache");
  if (kv_cache.empty() || kv_cache[0] == 0 || chunk.empty()) {
    return fail("the program is not a KV-cached generator (no use_kv_cache / get_max_seq_len method)");
  }
  const int64_t chunk_len = chunk[0], context_len = context.empty() ? chunk[0] : context[0];
  const auto eos = constants(module, "get_eos_ids");
  const int64_t prompt_len = static_cast<int64_t>(prompt.size());
  if (prompt_len >= context_len) {
    return fail("the prompt's " + std::to_string(prompt_len) + " tokens leave no room in the context of " +
                std::to_string(context_len));
  }
  new_tokens = std::min<long>(new_tokens, static_cast<long>(context_len - prompt_len));
  std::fprintf(stderr, "Generator: prefill chunk %lld, context %lld\n", static_cast<long long>(chunk_len),
               static_cast<long long>(context_len));
  std::vector<int64_t> tokens;
  std::string error;
  for (long run = 1; run <= executions; ++run) {
    tokens.clear();
    const auto prefill_start = Clock::now();
    int64_t token = -1;
    for (int64_t offset = 0; offset < prompt_len; offset += chunk_len) {
      const int64_t end = std::min(prompt_len, offset + chunk_len);
      token = forward_argmax(module, std::vector<int64_t>(prompt.begin() + offset, prompt.begin() + end), offset,
                             &error);
      if (token < 0) return fail(error);
    }
    const double prefill_ms = ms_since(prefill_start);
    const auto decode_start = Clock::now();
    long steps = 0;
    for (int64_t position = prompt_len;; ++position) {
      tokens.push_back(token);
      const bool stop = !ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end();
      if (stop || static_cast<long>(tokens.size()) >= new_tokens) break;
      token = forward_argmax(module, {token}, position, &error);
      if (token < 0) return fail(error);
      ++steps;
    }
    std::fprintf(stderr, "Generation %ld of %ld: prefill %lld tokens in %f ms, decode %ld tokens in %f ms\n", run,
                 executions, static_cast<long long>(prompt_len), prefill_ms, steps, ms_since(decode_start));
  }
  std::printf("Tokens:");
  for (const auto token : tokens) std::printf(" %lld", static_cast<long long>(token));
  std::printf("\n");
  return 0;
}

void print_peak_rss() {
  // The process's own peak resident set (kB), as the kernel counted it: exact, where polling /proc from outside can
  // miss a short run between two polls. VmHWM first: getrusage's ru_maxrss also keeps the peak of the image this
  // process replaced by exec (a Python parent's hundreds of MB when it was started from one without a shell).
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) {
      std::fprintf(stderr, "Peak resident set: %ld kB\n", std::strtol(line.c_str() + 6, nullptr, 10));
      return;
    }
  }
  struct rusage usage {};
  if (getrusage(RUSAGE_SELF, &usage) == 0) std::fprintf(stderr, "Peak resident set: %ld kB\n", usage.ru_maxrss);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, inputs_arg, output_dir, prompt_path, value;
  long executions = 1, threads = 0, new_tokens = 0;
  bool list_backends = false, ignore_eos = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (flag(arg, "model_path", &value)) {
      model_path = value;
    } else if (flag(arg, "num_executions", &value)) {
      executions = std::strtol(value.c_str(), nullptr, 10);
    } else if (flag(arg, "cpu_threads", &value)) {
      threads = std::strtol(value.c_str(), nullptr, 10);
    } else if (flag(arg, "inputs", &value)) {
      inputs_arg = value;
    } else if (flag(arg, "output_dir", &value)) {
      output_dir = value;
    } else if (flag(arg, "generate", &value)) {
      new_tokens = std::strtol(value.c_str(), nullptr, 10);
      if (new_tokens < 1) return fail("--generate takes a number of new tokens of at least 1");
    } else if (flag(arg, "prompt", &value)) {
      prompt_path = value;
    } else if (arg == "--ignore_eos") {
      ignore_eos = true;
    } else if (arg == "--list_backends") {
      list_backends = true;
    } else {
      return fail("unknown argument " + arg +
                  " (known: --model_path= --num_executions= --cpu_threads= --inputs= --output_dir= --list_backends"
                  " --generate= --prompt= --ignore_eos)");
    }
  }
  if (list_backends) {
    std::printf("backends:");
    for (size_t i = 0; i < executorch::runtime::get_num_registered_backends(); ++i) {
      auto name = executorch::runtime::get_backend_name(i);
      std::printf(" %s", name.ok() ? *name : "?");
    }
    std::printf("\nkernels: %zu\n", executorch::runtime::get_registered_kernels().size());
    return 0;
  }
  if (model_path.empty()) return fail("--model_path=FILE is required");
  if (executions < 1) return fail("--num_executions must be at least 1");
  if (threads > 0) executorch::extension::threadpool::get_threadpool()->_unsafe_reset_threadpool(threads);

  const auto load_start = Clock::now();
  Module module(model_path, Module::LoadMode::Mmap);
  if (module.load_method("forward") != Error::Ok) return fail("cannot load method forward of " + model_path);
  std::fprintf(stderr, "Model loaded in %f ms.\n", ms_since(load_start));
  if (new_tokens > 0 || !prompt_path.empty()) {
    if (new_tokens < 1 || prompt_path.empty()) return fail("--generate=N and --prompt=ids.bin go together");
    const int status = generate(module, prompt_path, new_tokens, executions, ignore_eos);
    if (status == 0) print_peak_rss();
    return status;
  }

  auto meta = module.method_meta("forward");
  if (!meta.ok()) return fail("no metadata for method forward");
  const auto input_files = split(inputs_arg, ',');
  if (input_files.size() != meta->num_inputs()) {
    return fail("the program takes " + std::to_string(meta->num_inputs()) + " inputs, --inputs names " +
                std::to_string(input_files.size()));
  }
  std::vector<std::vector<char>> buffers(input_files.size());
  std::vector<TensorPtr> tensors;
  std::vector<EValue> inputs;
  std::string resized;
  for (size_t i = 0; i < input_files.size(); ++i) {
    auto tensor_meta = meta->input_tensor_meta(i);
    if (!tensor_meta.ok()) return fail("input " + std::to_string(i) + " is not a tensor");
    if (!read_file(input_files[i], &buffers[i])) return fail("cannot read " + input_files[i]);
    const auto bound = tensor_meta->sizes();
    std::vector<executorch::aten::SizesType> sizes(bound.begin(), bound.end());
    const std::string mismatch = input_files[i] + " has " + std::to_string(buffers[i].size()) + " bytes, input " +
                                 std::to_string(i) + " takes " + std::to_string(tensor_meta->nbytes());
    if (buffers[i].size() != tensor_meta->nbytes()) {
      if (!fit_first_dimension(&sizes, tensor_meta->nbytes(), buffers[i].size())) return fail(mismatch);
      if (resized.empty()) resized = mismatch;  // said if the program refuses the smaller shape (a static input)
    }
    tensors.push_back(executorch::extension::from_blob(buffers[i].data(), sizes, tensor_meta->scalar_type()));
    inputs.emplace_back(tensors.back());
  }

  std::vector<EValue> outputs;
  const auto total_start = Clock::now();
  for (long run = 1; run <= executions; ++run) {
    const auto start = Clock::now();
    auto result = module.forward(inputs);
    const double elapsed = ms_since(start);
    if (!result.ok()) {
      if (run == 1 && !resized.empty()) return fail(resized);
      return fail("execution " + std::to_string(run) + " failed with error " + error_code(result.error()));
    }
    std::fprintf(stderr, "Iteration %ld of %ld: %f ms\n", run, executions, elapsed);
    outputs = std::move(*result);
  }
  std::fprintf(stderr, "Model executed successfully %ld time(s) in %f ms.\n", executions, ms_since(total_start));

  if (!output_dir.empty()) {
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (!outputs[i].isTensor()) continue;
      const auto& tensor = outputs[i].toTensor();
      const std::string path = output_dir + "/output_" + std::to_string(i) + ".bin";
      std::ofstream file(path, std::ios::binary);
      file.write(static_cast<const char*>(tensor.const_data_ptr()), static_cast<std::streamsize>(tensor.nbytes()));
      if (!file) return fail("cannot write " + path);
    }
  }
  print_peak_rss();
  return 0;
}
