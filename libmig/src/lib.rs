//! libmig: what a mig parallel program links.
#![deny(missing_docs)]
