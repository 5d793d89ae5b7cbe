module @jit_mean attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<6x5xf64>) -> (tensor<5xf64> {jax.result_info = "result"}) {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f64>
    %0 = stablehlo.reduce(%arg0 init: %cst) applies stablehlo.add across dimensions = [0] : (tensor<6x5xf64>, tensor<f64>) -> tensor<5xf64>
    %cst_0 = stablehlo.constant dense<6.000000e+00> : tensor<f64>
    %1 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f64>) -> tensor<5xf64>
    %2 = stablehlo.divide %0, %1 : tensor<5xf64>
    return %2 : tensor<5xf64>
  }
}
