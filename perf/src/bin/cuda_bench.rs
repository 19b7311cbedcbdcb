//! `cargo run --release -p baton-perf --bin cuda_bench [-- --quick]`: the
//! CUDA executor's correctness and launch overhead on a GPU machine. Exits
//! 2 with the typed "no CUDA device" where there is none.

use baton_gpu::cuda::CudaConfig;

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let result = if quick {
        baton_perf::cuda_bench::run(&CudaConfig::small(), &[1, 8], &[1, 8], 20)
    } else {
        baton_perf::cuda_bench::run(&CudaConfig::serving(), &[1, 8, 32], &[1, 8, 32], 200)
    };
    match result {
        Ok(r) => baton_perf::cuda_bench::print(&r),
        Err(e) => {
            eprintln!("cuda_bench: {e}");
            std::process::exit(2);
        }
    }
}
