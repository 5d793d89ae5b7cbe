// Hand-written linalg on tensors (upstream MLIR syntax): a matrix product into a zeroed
// tensor, an affine combination as one linalg.generic accumulated onto it, a matrix-vector
// product and a batched matrix product. Unnamed arguments read as arg0, arg1, ...
func.func @forward(%X: tensor<6x5xf64>, %W: tensor<5x4xf64>, %R: tensor<6x4xf64>,
                   %arg3: tensor<6x5xf64>, %v: tensor<5xf64>,
                   %P: tensor<3x4x2xf64>, %Q: tensor<3x2x5xf64>)
    -> (tensor<6x4xf64>, tensor<6xf64>, tensor<3x4x5xf64>) {
  %zero = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<6x4xf64>
  %z = linalg.fill ins(%zero : f64) outs(%e : tensor<6x4xf64>) -> tensor<6x4xf64>
  %xw = linalg.matmul ins(%X, %W : tensor<6x5xf64>, tensor<5x4xf64>)
                      outs(%z : tensor<6x4xf64>) -> tensor<6x4xf64>
  // Y = X W + 0.5 R - R .* R  (the generic adds onto the product)
  %Y = linalg.generic {
      indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
      iterator_types = ["parallel", "parallel"]}
      ins(%R : tensor<6x4xf64>) outs(%xw : tensor<6x4xf64>) {
    ^bb0(%r: f64, %acc: f64):
      %half = arith.constant 0.5 : f64
      %h = arith.mulf %r, %half : f64
      %rr = arith.mulf %r, %r : f64
      %d = arith.subf %h, %rr : f64
      %s = arith.addf %acc, %d : f64
      linalg.yield %s : f64
  } -> tensor<6x4xf64>
  %e1 = tensor.empty() : tensor<6xf64>
  %z1 = linalg.fill ins(%zero : f64) outs(%e1 : tensor<6xf64>) -> tensor<6xf64>
  %u = linalg.matvec ins(%arg3, %v : tensor<6x5xf64>, tensor<5xf64>)
                     outs(%z1 : tensor<6xf64>) -> tensor<6xf64>
  %e2 = tensor.empty() : tensor<3x4x5xf64>
  %z2 = linalg.fill ins(%zero : f64) outs(%e2 : tensor<3x4x5xf64>) -> tensor<3x4x5xf64>
  %PQ = linalg.batch_matmul ins(%P, %Q : tensor<3x4x2xf64>, tensor<3x2x5xf64>)
                            outs(%z2 : tensor<3x4x5xf64>) -> tensor<3x4x5xf64>
  return %Y, %u, %PQ : tensor<6x4xf64>, tensor<6xf64>, tensor<3x4x5xf64>
}
