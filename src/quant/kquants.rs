//! (family file — kernels not written yet)

use super::QuantKernels;

pub static KERNELS: &[QuantKernels] = &[];
