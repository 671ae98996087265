#!/usr/bin/env bash
# check_architecture_rules.sh ROOT — docs/ARCHITECTURE.md's two grep rules, checked on ROOT/src:
#  1. only src/comm calls MPI (`grep -rn "MPI_" src --include=*.cpp | grep -v src/comm` prints nothing);
#  2. no file outside src/model/architectures.cpp compares model_type: no model type named as a string literal
#     ("deepseek_v..."), no model_type (the field or config.json's key) beside ==, != or a string comparison.
# Prints every offending line and exits 1 when a rule is broken.
set -u
cd "$1" || exit 2
status=0
mpi=$(grep -rn "MPI_" src --include=*.cpp | grep -v "^src/comm/")
if [ -n "$mpi" ]; then
  echo "FAIL: MPI called outside src/comm (only src/comm may use MPI):"; echo "$mpi"; status=1
fi
compares=$(grep -rnE \
  -e '"deepseek_v[0-9]' \
  -e 'model_type[]")]*[[:space:]]*(==|!=)' \
  -e '(==|!=)[[:space:]]*[][A-Za-z_.>()-]*model_type' \
  -e '"model_type"[^;]*\)[[:space:]]*(==|!=)' \
  -e 'model_type[^;]*\.(compare|starts_with|ends_with|find|rfind)\(' \
  src --include=*.cpp --include=*.h --include=*.cu --include=*.cuh | grep -v "^src/model/architectures.cpp:")
if [ -n "$compares" ]; then
  echo "FAIL: model_type compared outside src/model/architectures.cpp (put the decision behind a registry function):"
  echo "$compares"; status=1
fi
[ $status -eq 0 ] && echo "ok: MPI only in src/comm; model_type compared only in src/model/architectures.cpp"
exit $status
