//! Loading one component file: compiled (or found compiled), measured
//! against the pool, checked and asked what it is. Apart from [`super::loaded`]
//! so that the loaded component, which the runtime's capabilities are
//! typed over, takes nothing from the runtime that loads it.

use std::path::Path;

use super::engine::Runtime;
use super::loaded::{FileStamp, Strategy};

impl Runtime {
    /// Compiles, checks and describes one component.
    pub(super) async fn load(
        &self,
        file: &Path,
        bytes: Vec<u8>,
        sha256: &str,
        stamp: FileStamp,
    ) -> Result<Strategy, String> {
        let component = self
            .compile(bytes, sha256)
            .await
            .map_err(|err| format!("not a valid WebAssembly component: {err:#}"))?;
        self.fits_pool(&component)?;
        let prepared = self
            .prepare(&component)
            .await
            .map_err(|err| format!("{err:#}"))?;
        Strategy::new(prepared, file, sha256, stamp)
    }
}
