module @jit_softmax attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<6x5xf64>) -> (tensor<6x5xf64> {jax.result_info = "result"}) {
    %cst = stablehlo.constant dense<0xFFF0000000000000> : tensor<f64>
    %0 = stablehlo.reduce(%arg0 init: %cst) applies stablehlo.maximum across dimensions = [1] : (tensor<6x5xf64>, tensor<f64>) -> tensor<6xf64>
    %1 = stablehlo.broadcast_in_dim %0, dims = [0] : (tensor<6xf64>) -> tensor<6x1xf64>
    %2 = stablehlo.broadcast_in_dim %1, dims = [0, 1] : (tensor<6x1xf64>) -> tensor<6x5xf64>
    %3 = stablehlo.subtract %arg0, %2 : tensor<6x5xf64>
    %4 = stablehlo.exponential %3 : tensor<6x5xf64>
    %cst_0 = stablehlo.constant dense<0.000000e+00> : tensor<f64>
    %5 = stablehlo.reduce(%4 init: %cst_0) applies stablehlo.add across dimensions = [1] : (tensor<6x5xf64>, tensor<f64>) -> tensor<6xf64>
    %6 = stablehlo.broadcast_in_dim %5, dims = [0] : (tensor<6xf64>) -> tensor<6x1xf64>
    %7 = stablehlo.broadcast_in_dim %6, dims = [0, 1] : (tensor<6x1xf64>) -> tensor<6x5xf64>
    %8 = stablehlo.divide %4, %7 : tensor<6x5xf64>
    return %8 : tensor<6x5xf64>
  }
}
