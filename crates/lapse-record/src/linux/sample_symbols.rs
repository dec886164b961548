//! Sampling: the frame and function tables, resolved once at the end.
//!
//! Every interned frame is symbolized in its module (inline chain included)
//! and every distinct (module, function name) becomes one function. A frame
//! nothing is known about becomes a function named by its address
//! (`0x1234`), as the model prescribes.

use std::collections::HashMap;

use lapse_data::{FrameFunction, FrameInfo, FunctionId, FunctionInfo, ModuleId};

use super::stack_table::StackTable;
use super::unwind_glue::ModuleTable;

#[derive(Default)]
struct FunctionTable {
    ids: HashMap<(ModuleId, String), FunctionId>,
    functions: Vec<FunctionInfo>,
}

impl FunctionTable {
    fn intern(
        &mut self,
        module: ModuleId,
        name: &str,
        fill: impl FnOnce() -> FunctionInfo,
    ) -> FunctionId {
        if let Some(&id) = self.ids.get(&(module, name.to_owned())) {
            return id;
        }
        let id = FunctionId(self.functions.len() as u32);
        let mut info = fill();
        info.id = id;
        self.functions.push(info);
        self.ids.insert((module, name.to_owned()), id);
        id
    }
}

/// Symbolizes every frame of `stacks`; returns the complete frame table
/// (replacing the unsymbolized frames written during recording) and the
/// function table.
pub(crate) fn resolve(
    stacks: &StackTable,
    modules: &ModuleTable,
) -> (Vec<FrameInfo>, Vec<FunctionInfo>) {
    let mut functions = FunctionTable::default();
    let mut frames = Vec::with_capacity(stacks.frame_count());
    for (id, module, address) in stacks.frames() {
        let elf = modules.get(module).and_then(|m| m.elf.as_ref());
        let symbolized = elf.map(|e| e.symbolize(address)).unwrap_or_default();
        let mut chain = Vec::with_capacity(symbolized.frames.len().max(1));
        for (depth, f) in symbolized.frames.iter().enumerate() {
            let function = functions.intern(module, &f.name, || {
                // Only the function whose code this is has a known start
                // (its symbol); inlined ones are identified by name alone.
                let start = if depth == 0 {
                    symbolized.symbol.as_ref().map(|s| s.start)
                } else {
                    None
                };
                let (source_file, line) = match (start, elf) {
                    (Some(s), Some(e)) => e.location(s),
                    _ => (None, None),
                };
                FunctionInfo {
                    id: FunctionId(0),
                    module,
                    address: start.unwrap_or(0),
                    name: f.name.clone(),
                    source_file,
                    line,
                }
            });
            chain.push(FrameFunction {
                function,
                source_file: f.file.clone(),
                line: f.line,
            });
        }
        if chain.is_empty() {
            let name = format!("{address:#x}");
            let function = functions.intern(module, &name, || FunctionInfo {
                id: FunctionId(0),
                module,
                address,
                name: name.clone(),
                source_file: None,
                line: None,
            });
            chain.push(FrameFunction {
                function,
                source_file: None,
                line: None,
            });
        }
        frames.push(FrameInfo {
            id,
            module,
            address,
            functions: chain,
        });
    }
    (frames, functions.functions)
}
