module @jit_layernorm attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<6x5xf64>, %arg1: tensor<5xf64>, %arg2: tensor<5xf64>) -> (tensor<6x5xf64> {jax.result_info = "result"}) {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f64>
    %0 = stablehlo.reduce(%arg0 init: %cst) applies stablehlo.add across dimensions = [1] : (tensor<6x5xf64>, tensor<f64>) -> tensor<6xf64>
    %1 = stablehlo.broadcast_in_dim %0, dims = [0] : (tensor<6xf64>) -> tensor<6x1xf64>
    %cst_0 = stablehlo.constant dense<5.000000e+00> : tensor<f64>
    %2 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f64>) -> tensor<6x1xf64>
    %3 = stablehlo.divide %1, %2 : tensor<6x1xf64>
    %4 = stablehlo.broadcast_in_dim %3, dims = [0, 1] : (tensor<6x1xf64>) -> tensor<6x5xf64>
    %5 = stablehlo.subtract %arg0, %4 : tensor<6x5xf64>
    %6 = stablehlo.multiply %5, %5 : tensor<6x5xf64>
    %cst_1 = stablehlo.constant dense<0.000000e+00> : tensor<f64>
    %7 = stablehlo.reduce(%6 init: %cst_1) applies stablehlo.add across dimensions = [1] : (tensor<6x5xf64>, tensor<f64>) -> tensor<6xf64>
    %8 = stablehlo.broadcast_in_dim %7, dims = [0] : (tensor<6xf64>) -> tensor<6x1xf64>
    %cst_2 = stablehlo.constant dense<5.000000e+00> : tensor<f64>
    %9 = stablehlo.broadcast_in_dim %cst_2, dims = [] : (tensor<f64>) -> tensor<6x1xf64>
    %10 = stablehlo.divide %8, %9 : tensor<6x1xf64>
    %11 = stablehlo.broadcast_in_dim %3, dims = [0, 1] : (tensor<6x1xf64>) -> tensor<6x5xf64>
    %12 = stablehlo.subtract %arg0, %11 : tensor<6x5xf64>
    %cst_3 = stablehlo.constant dense<1.000000e-05> : tensor<f64>
    %13 = stablehlo.broadcast_in_dim %cst_3, dims = [] : (tensor<f64>) -> tensor<6x1xf64>
    %14 = stablehlo.add %10, %13 : tensor<6x1xf64>
    %15 = stablehlo.sqrt %14 : tensor<6x1xf64>
    %16 = stablehlo.broadcast_in_dim %15, dims = [0, 1] : (tensor<6x1xf64>) -> tensor<6x5xf64>
    %17 = stablehlo.divide %12, %16 : tensor<6x5xf64>
    %18 = stablehlo.broadcast_in_dim %arg1, dims = [1] : (tensor<5xf64>) -> tensor<1x5xf64>
    %19 = stablehlo.broadcast_in_dim %18, dims = [0, 1] : (tensor<1x5xf64>) -> tensor<6x5xf64>
    %20 = stablehlo.multiply %17, %19 : tensor<6x5xf64>
    %21 = stablehlo.broadcast_in_dim %arg2, dims = [1] : (tensor<5xf64>) -> tensor<1x5xf64>
    %22 = stablehlo.broadcast_in_dim %21, dims = [0, 1] : (tensor<1x5xf64>) -> tensor<6x5xf64>
    %23 = stablehlo.add %20, %22 : tensor<6x5xf64>
    return %23 : tensor<6x5xf64>
  }
}
