// An ExecuTorch runner built from the libraries of the `executorch` wheel alone (no torch, no Python at
// run time): how an app on a board loads and runs a .pte. `edgeprune devices setup` compiles it on the
// board with the board's g++ against the wheel's headers and libraries, at the host's executorch version.
//
// Its command line and log lines are those of ExecuTorch's examples/portable/executor_runner, so that the
// parser for that tool (edgeprune/bench/native/executor_runner.py) reads both:
//   --model_path=F --num_executions=N --cpu_threads=T --inputs=a.bin,b.bin
// Inputs are raw little-endian tensors in call order, with the shapes and dtypes of the program's own
// input metadata. Two additions: --output_dir=D writes every output tensor as output_<i>.bin (raw, the
// output's dtype) after the last execution, and --list_backends prints the backends and kernel count that
// registered when the libraries loaded (what setup checks).
//
// We write our own rather than build upstream's: that one needs ExecuTorch's source tree and CMake build,
// and PyPI ships only the wheel's prebuilt libraries and headers.

#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>
#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/kernel/operator_registry.h>

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
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

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, inputs_arg, output_dir, value;
  long executions = 1, threads = 0;
  bool list_backends = false;
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
    } else if (arg == "--list_backends") {
      list_backends = true;
    } else {
      return fail("unknown argument " + arg +
                  " (known: --model_path= --num_executions= --cpu_threads= --inputs= --output_dir= --list_backends)");
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
  for (size_t i = 0; i < input_files.size(); ++i) {
    auto tensor_meta = meta->input_tensor_meta(i);
    if (!tensor_meta.ok()) return fail("input " + std::to_string(i) + " is not a tensor");
    if (!read_file(input_files[i], &buffers[i])) return fail("cannot read " + input_files[i]);
    if (buffers[i].size() != tensor_meta->nbytes()) {
      return fail(input_files[i] + " has " + std::to_string(buffers[i].size()) + " bytes, input " +
                  std::to_string(i) + " takes " + std::to_string(tensor_meta->nbytes()));
    }
    const auto sizes = tensor_meta->sizes();
    tensors.push_back(executorch::extension::from_blob(
        buffers[i].data(), std::vector<executorch::aten::SizesType>(sizes.begin(), sizes.end()),
        tensor_meta->scalar_type()));
    inputs.emplace_back(tensors.back());
  }

  std::vector<EValue> outputs;
  const auto total_start = Clock::now();
  for (long run = 1; run <= executions; ++run) {
    const auto start = Clock::now();
    auto result = module.forward(inputs);
    const double elapsed = ms_since(start);
    if (!result.ok()) {
      return fail("execution " + std::to_string(run) + " failed with error 0x" +
                  std::to_string(static_cast<int>(result.error())));
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
  // The process's own peak resident set (kB on Linux), as the kernel counted it: exact, where polling /proc from
  // outside can miss a short run between two polls.
  struct rusage usage {};
  if (getrusage(RUSAGE_SELF, &usage) == 0) std::fprintf(stderr, "Peak resident set: %ld kB\n", usage.ru_maxrss);
  return 0;
}
