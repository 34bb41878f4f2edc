// Malformed IR, unknown passes and bad options are user errors: one located line, exit 1,
// never a Python traceback.
// RUN: not ember-opt %s 2>&1 | FileCheck %s --check-prefix=PARSE
// RUN: not ember-opt %s --pass-pipeline='builtin.module(no-such-pass)' 2>&1 | FileCheck %s --check-prefix=PASS
// RUN: not ember-opt %s --pass-pipeline='builtin.module(canonicalize' 2>&1 | FileCheck %s --check-prefix=UNBAL
// RUN: not ember-opt %s.missing 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: cat %s | not ember-opt - 2>&1 | FileCheck %s --check-prefix=STDIN
// RUN: not ember-opt %s -o %t.out 2>&1 | FileCheck %s --check-prefix=PARSE

// PARSE: errors.mlir:[[# @LINE + 6]]:32: error: use of undeclared SSA value name
// PARSE-NOT: Traceback
// PASS: ember-opt: error: 'no-such-pass' is neither an ember pass nor an upstream pass
// UNBAL: ember-opt: error: unbalanced brackets or quotes in pass pipeline
// MISSING: ember-opt: error: cannot read '{{.*}}errors.mlir.missing'
// STDIN: <stdin>:[[# @LINE + 1]]:32: error: use of undeclared SSA value name
func.func @f() -> i32 { return %undefined : i32 }
