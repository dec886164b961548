//! The `#[lapse::profile]` attribute of the `lapse` crate (use it through
//! `lapse`, which documents it; the expansion names `::lapse::__private`).
//!
//! Design constraints: no dependency (the `lapse` crate must build offline
//! from a path), so the token streams are read by hand with `proc_macro`
//! alone, reading only what instrumenting needs (qualifiers, the name, the
//! body; an impl block's type and trait as tokens). Bad usage is a
//! `compile_error!` pointing at the offending tokens, never a panic, and
//! the item is given back as it was so no other error follows.

use proc_macro::{TokenStream, TokenTree};

mod args;
mod expand;
mod item;
mod tokens;

use expand::Naming;
use item::{FnItem, ImplBlock};
use tokens::Error;

/// Records each call of a function (or of every method of an impl block)
/// as a call of a function of the program, named by its path. See the
/// `lapse` crate's documentation.
#[proc_macro_attribute]
pub fn profile(args: TokenStream, item: TokenStream) -> TokenStream {
    let tokens: Vec<TokenTree> = item.clone().into_iter().collect();
    let args = match args::parse(args) {
        Ok(a) => a,
        Err(e) => return with_error(item, e),
    };
    if let Some(f) = FnItem::parse(tokens.clone()) {
        return expand::function(f, &args, &Naming::Free);
    }
    match ImplBlock::parse(tokens) {
        Ok(Some(block)) => {
            if let Some(name) = &args.name {
                let e = Error::new(
                    name.span(),
                    "`name = ...` names one function: put it on the method, inside the impl block",
                );
                return with_error(item, e);
            }
            if let Some(span) = args.skip {
                return with_error(
                    item,
                    Error::new(span, "`skip` goes on a method, inside the impl block"),
                );
            }
            expand::impl_block(block)
        }
        Ok(None) => with_error(
            item.clone(),
            Error::new(
                item.into_iter()
                    .next()
                    .map_or_else(proc_macro::Span::call_site, |t| t.span()),
                "#[lapse::profile] goes on a function, a method or an impl block",
            ),
        ),
        Err(e) => with_error(item, e),
    }
}

/// The item as it was, and the error.
pub(crate) fn with_error(item: impl IntoIterator<Item = TokenTree>, e: Error) -> TokenStream {
    let mut out = e.to_tokens();
    out.extend(item);
    out
}
