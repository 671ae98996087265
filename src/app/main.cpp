// deepinfer: one SPMD binary. Every rank parses the same argv; only rank 0 prints help and errors; every
// rank exits with the same code. This file holds only the command line; the commands live beside it.
#include <CLI/CLI.hpp>

#include <iostream>
#include <sstream>

#include "src/app/commands.h"
#include "src/core/error.h"
#include "src/core/log.h"
#include "src/dist/mpi_session.h"

int main(int argc, char** argv) {
  deepinfer::MpiSession mpi(&argc, &argv);
  const bool is_rank0 = mpi.world_rank() == 0;

  CLI::App cli{"deepinfer: distributed inference for DeepSeek-style MoE models (run under mpirun)"};
  cli.require_subcommand(1);
  std::string log_dir;
  cli.add_option("--log-dir", log_dir, "Also write every rank's full log to DIR/rank-N.log");

  deepinfer::app::InfoOptions info;
  CLI::App* info_cmd = cli.add_subcommand("info", "Print each rank's role, groups, GPU and host");
  info_cmd->add_option("--deploy", info.deploy_path, "Deployment file (configs/deploy/*.toml)")->required();

  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Every rank reaches the same verdict; only rank 0 speaks.
    std::ostringstream sink;
    const int cli_code = is_rank0 ? cli.exit(e) : cli.exit(e, sink, sink);
    mpi.finalize();
    return cli_code == 0 ? 0 : deepinfer::kExitInputError;  // --help is success; a bad flag is bad input
  }

  deepinfer::LogOptions log_options;
  if (!log_dir.empty()) log_options.log_dir = log_dir;
  deepinfer::init_logging(mpi.world_rank(), log_options);

  int code = 0;
  if (info_cmd->parsed()) code = deepinfer::app::run_info(info, MPI_COMM_WORLD);
  mpi.finalize();
  return code;
}
