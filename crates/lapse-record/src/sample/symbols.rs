//! Sampling: the frame and function tables.
//!
//! Two passes over the same function table. While recording, each new frame
//! gets its function from the symbol table alone ([`FrameSymbols::quick`]: a
//! binary search, no DWARF), so a file cut short by a killed recorder still
//! names its functions. At the end every frame is resolved in full
//! ([`FrameSymbols::full`]: inline chain, source lines) and rewritten;
//! records with the same id replace the earlier ones. Every distinct
//! (module, function name) is one function. Code no symbol names is grouped
//! by the unwind table into functions named `module+0xSTART` (the module's
//! entry point: `_start`); JIT code by its process' perf map, read at the
//! end; a frame nothing at all is known about becomes a function named by
//! its address (`0x1234`), as the model says.

use std::collections::HashMap;

use lapse_data::{FrameFunction, FrameId, FrameInfo, FunctionId, FunctionInfo, ModuleId};
use lapse_symbols::ElfModule;

use super::stack_table::StackTable;
use super::unwind_glue::ModuleTable;
use crate::SymbolProgress;

#[derive(Default)]
pub(crate) struct FrameSymbols {
    ids: HashMap<(ModuleId, String), FunctionId>,
    functions: Vec<FunctionInfo>,
    /// Functions already handed out by [`FrameSymbols::take_new_functions`].
    taken: usize,
}

impl FrameSymbols {
    fn intern(&mut self, module: ModuleId, name: &str, address: Option<u64>) -> FunctionId {
        if let Some(&id) = self.ids.get(&(module, name.to_owned())) {
            return id;
        }
        let id = FunctionId(self.functions.len() as u32);
        self.functions.push(FunctionInfo {
            id,
            module,
            address: address.unwrap_or(0),
            name: name.to_owned(),
            source_file: None,
            line: None,
        });
        self.ids.insert((module, name.to_owned()), id);
        id
    }

    /// The one function of a pseudo module's frames (`[truncated]`).
    fn marker(&mut self, module: ModuleId, name: &str) -> FrameFunction {
        FrameFunction {
            function: self.intern(module, name, None),
            source_file: None,
            line: None,
        }
    }

    /// The function of a frame nothing is known about: named by its address.
    fn anonymous(&mut self, module: ModuleId, address: u64) -> FrameFunction {
        FrameFunction {
            function: self.intern(module, &format!("{address:#x}"), Some(address)),
            source_file: None,
            line: None,
        }
    }

    /// Names `frames` from the symbol tables only; cheap enough to run while
    /// the target does.
    pub(crate) fn quick(&mut self, frames: &mut [FrameInfo], modules: &ModuleTable) {
        for frame in frames {
            let loaded = modules.get(frame.module);
            if let Some(name) = loaded.and_then(|m| m.marker) {
                frame.functions = vec![self.marker(frame.module, name)];
                continue;
            }
            let elf = loaded.and_then(|m| m.elf.as_ref());
            let f = match elf.and_then(|e| e.function_or_range_at(frame.address)) {
                Some(sym) => FrameFunction {
                    function: self.intern(frame.module, &sym.name, Some(sym.start)),
                    source_file: None,
                    line: None,
                },
                None => self.anonymous(frame.module, frame.address),
            };
            frame.functions = vec![f];
        }
    }

    /// Every frame of `stacks` fully resolved (inline chains, lines), and
    /// source positions for the functions whose start is known. Goes module
    /// by module and frees each module's DWARF when done with it, so only
    /// one module's debug info is in memory at a time. `progress` counts
    /// the frames resolved.
    pub(crate) fn full(
        &mut self,
        stacks: &StackTable,
        modules: &mut ModuleTable,
        progress: Option<&SymbolProgress>,
    ) -> Vec<FrameInfo> {
        let mut order: Vec<(FrameId, ModuleId, u64)> = stacks.frames().collect();
        if let Some(p) = progress {
            p.add_work(order.len() as u64);
        }
        let advance = || {
            if let Some(p) = progress {
                p.advance();
            }
        };
        order.sort_by_key(|&(id, module, _)| (module, id));
        let mut functions_of: HashMap<ModuleId, Vec<usize>> = HashMap::new();
        for (i, f) in self.functions.iter().enumerate() {
            functions_of.entry(f.module).or_default().push(i);
        }
        let mut frames: Vec<Option<FrameInfo>> = vec![None; order.len()];
        for group in order.chunk_by(|a, b| a.1 == b.1) {
            let module = group[0].1;
            if let Some(name) = modules.get(module).and_then(|m| m.marker) {
                for &(id, _, address) in group {
                    advance();
                    let f = self.marker(module, name);
                    frames[id.0 as usize] = Some(FrameInfo {
                        id,
                        module,
                        address,
                        functions: vec![f],
                    });
                }
                continue;
            }
            let jit_map = modules
                .get(module)
                .and_then(|m| m.jit.as_ref())
                .and_then(|j| j.map.as_ref());
            if let Some(map) = jit_map {
                for &(id, _, address) in group {
                    advance();
                    let f = match map.lookup(address) {
                        Some((start, _, name)) => FrameFunction {
                            function: self.intern(module, name, Some(start)),
                            source_file: None,
                            line: None,
                        },
                        None => self.anonymous(module, address),
                    };
                    frames[id.0 as usize] = Some(FrameInfo {
                        id,
                        module,
                        address,
                        functions: vec![f],
                    });
                }
                continue;
            }
            let Some(elf) = modules.get_mut(module).and_then(|m| m.elf.as_mut()) else {
                for &(id, _, address) in group {
                    advance();
                    let f = self.anonymous(module, address);
                    frames[id.0 as usize] = Some(FrameInfo {
                        id,
                        module,
                        address,
                        functions: vec![f],
                    });
                }
                continue;
            };
            for &(id, _, address) in group {
                advance();
                let functions = self.chain(elf, module, address);
                frames[id.0 as usize] = Some(FrameInfo {
                    id,
                    module,
                    address,
                    functions,
                });
            }
            for &i in functions_of.get(&module).into_iter().flatten() {
                let info = &mut self.functions[i];
                if info.source_file.is_none()
                    && info.address != 0
                    && elf.function_at(info.address).is_some()
                {
                    (info.source_file, info.line) = elf.location(info.address);
                }
            }
            elf.release_dwarf();
        }
        frames.into_iter().flatten().collect()
    }

    /// The inline chain of one address, outermost first, interned.
    fn chain(&mut self, elf: &ElfModule, module: ModuleId, address: u64) -> Vec<FrameFunction> {
        let symbolized = elf.symbolize(address);
        let mut chain = Vec::with_capacity(symbolized.frames.len().max(1));
        for (depth, f) in symbolized.frames.iter().enumerate() {
            // Only the function whose code this is has a known start (its
            // symbol); inlined ones are identified by name alone.
            let start = (depth == 0)
                .then(|| symbolized.symbol.as_ref().map(|s| s.start))
                .flatten();
            let function = self.intern(module, &f.name, start);
            chain.push(FrameFunction {
                function,
                source_file: f.file.clone(),
                line: f.line,
            });
        }
        if chain.is_empty() {
            chain.push(self.anonymous(module, address));
        }
        chain
    }

    /// Functions added since the last call, to be written before the frames using them.
    pub(crate) fn take_new_functions(&mut self) -> Vec<FunctionInfo> {
        let new = self.functions[self.taken..].to_vec();
        self.taken = self.functions.len();
        new
    }

    /// The whole function table (final values).
    pub(crate) fn functions(&self) -> &[FunctionInfo] {
        &self.functions
    }
}
