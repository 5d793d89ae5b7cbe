module @jit_mttkrp attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<4x5x6xf64>, %arg1: tensor<5x3xf64>, %arg2: tensor<6x3xf64>) -> (tensor<4x3xf64> {jax.result_info = "result"}) {
    %0 = stablehlo.dot_general %arg2, %arg1, batching_dims = [1] x [1], contracting_dims = [] x [], precision = [DEFAULT, DEFAULT] : (tensor<6x3xf64>, tensor<5x3xf64>) -> tensor<3x6x5xf64>
    %1 = stablehlo.transpose %0, dims = [1, 0, 2] : (tensor<3x6x5xf64>) -> tensor<6x3x5xf64>
    %2 = stablehlo.dot_general %arg0, %1, contracting_dims = [1, 2] x [2, 0], precision = [DEFAULT, DEFAULT] : (tensor<4x5x6xf64>, tensor<6x3x5xf64>) -> tensor<4x3xf64>
    return %2 : tensor<4x3xf64>
  }
}
