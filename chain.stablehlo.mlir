module @jit_chain attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<6x5xf64>, %arg1: tensor<5x4xf64>, %arg2: tensor<4x3xf64>) -> (tensor<6x3xf64> {jax.result_info = "result"}) {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<6x5xf64>, tensor<5x4xf64>) -> tensor<6x4xf64>
    %1 = stablehlo.dot_general %0, %arg2, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<6x4xf64>, tensor<4x3xf64>) -> tensor<6x3xf64>
    return %1 : tensor<6x3xf64>
  }
}
