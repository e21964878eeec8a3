//===- DsFused.td - fused elementwise kernels --------------*- tablegen -*-===//
//
// Part of the ds project. Included from DsOps.td.
//
// Ops that `--ds-fuse-elementwise` makes from chains of other ops (issue 24
// item 1). The program encoding is include/ds/Support/FusedProgram.h's.
//
//===----------------------------------------------------------------------===//

#ifndef DS_DIALECT_DS_IR_DSFUSED_TD
#define DS_DIALECT_DS_IR_DSFUSED_TD

def Ds_FusedElementwiseOp : Ds_Op<"fused_elementwise",
    [Pure, Ds_Elementwise]> {
  let summary = "a chain of f32 elementwise ops evaluated in one loop nest";
  let description = [{
    `--ds-fuse-elementwise` replaces a chain of f32 elementwise ops (add,
    sub, mul, div, pow, max, min, neg, abs, exp, log, sqrt, reciprocal,
    erf, tanh, relu, sigmoid, where) by this op: one kernel that reads its
    inputs with numpy broadcasting and writes one result, with no
    intermediate tensor. `program` lists the operations, four integers
    each (`opcode, a, b, c`; include/ds/Support/FusedProgram.h): a
    reference r >= 0 is register r (the inputs, then each instruction's
    result), r < 0 is `constants[-r-1]`; the last instruction's register is
    the result.

    Constraints (the verifier):
    - the result is f32; every input is f32, or i1 and read only as a
      `where` condition; every input broadcasts to the result's shape;
    - the program is a non-empty list of known opcodes, each reading
      defined registers or constants (FusedProgram.h's `checkFusedProgram`).

    ```mlir
    // 0.5 * (x + b): register 2 is x + b, constant 0 is 0.5
    %y = ds.fused_elementwise %x, %b {
           program = array<i64: 1, 0, 1, 0,  3, 2, -1, 0>,
           constants = array<f64: 0.5>}
         : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Variadic<Ds_Tensor>:$inputs,
                       DenseI64ArrayAttr:$program,
                       DefaultValuedAttr<DenseF64ArrayAttr, "{}">:$constants);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = [{
    $inputs attr-dict `:` functional-type($inputs, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Instructions in the program.
    int64_t getNumInstructions() { return getProgram().size() / 4; }
  }];
}

#endif // DS_DIALECT_DS_IR_DSFUSED_TD
