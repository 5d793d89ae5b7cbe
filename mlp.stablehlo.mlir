module @jit_mlp attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<6x5xf64>, %arg1: tensor<5x4xf64>, %arg2: tensor<4xf64>, %arg3: tensor<4x3xf64>, %arg4: tensor<3xf64>) -> (tensor<6x3xf64> {jax.result_info = "result"}) {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<6x5xf64>, tensor<5x4xf64>) -> tensor<6x4xf64>
    %1 = stablehlo.broadcast_in_dim %arg2, dims = [1] : (tensor<4xf64>) -> tensor<1x4xf64>
    %2 = stablehlo.broadcast_in_dim %1, dims = [0, 1] : (tensor<1x4xf64>) -> tensor<6x4xf64>
    %3 = stablehlo.add %0, %2 : tensor<6x4xf64>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f64>
    %4 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f64>) -> tensor<6x4xf64>
    %5 = stablehlo.maximum %3, %4 : tensor<6x4xf64>
    %6 = stablehlo.dot_general %5, %arg3, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<6x4xf64>, tensor<4x3xf64>) -> tensor<6x3xf64>
    %7 = stablehlo.broadcast_in_dim %arg4, dims = [1] : (tensor<3xf64>) -> tensor<1x3xf64>
    %8 = stablehlo.broadcast_in_dim %7, dims = [0, 1] : (tensor<1x3xf64>) -> tensor<6x3xf64>
    %9 = stablehlo.add %6, %8 : tensor<6x3xf64>
    return %9 : tensor<6x3xf64>
  }
}
