// The module's side of torch_module.h: the table of its LibTorch functions.
#include "compute/torch_module.h"

extern "C" __attribute__((visibility("default"))) const plexus::TorchModuleFunctions* plexus_torch_module() {
  static const plexus::TorchModuleFunctions functions{
      plexus::kTorchModuleVersion,       &plexus::MakeTorchTrainer,  &plexus::ReadScriptModel,
      &plexus::DescribeLayoutDifference, &plexus::MakeScriptTrainer, &plexus::WriteScriptModel,
  };
  return &functions;
}
