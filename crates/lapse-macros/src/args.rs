//! The attribute's arguments: `#[lapse::profile]`,
//! `#[lapse::profile(name = "...")]`, and `#[lapse::profile(skip)]` on a
//! method of a profiled impl block.

use proc_macro::{Literal, Span, TokenStream, TokenTree};

use crate::tokens::{is_punct, Error};

#[derive(Default)]
pub struct Args {
    /// An explicit name: a string literal, as written.
    pub name: Option<Literal>,
    /// Where `skip` was written, if it was.
    pub skip: Option<Span>,
}

const EXPECTED: &str = "#[lapse::profile] takes no argument, `name = \"...\"`, or (on a method of a profiled impl block) `skip`";

pub fn parse(args: TokenStream) -> Result<Args, Error> {
    let tokens: Vec<TokenTree> = args.into_iter().collect();
    let mut out = Args::default();
    let mut i = 0;
    while i < tokens.len() {
        let TokenTree::Ident(key) = &tokens[i] else {
            return Err(Error::new(tokens[i].span(), EXPECTED));
        };
        match key.to_string().as_str() {
            "name" => {
                if !is_punct(tokens.get(i + 1), '=') {
                    return Err(Error::new(key.span(), "expected `name = \"...\"`"));
                }
                let value = tokens.get(i + 2);
                let Some(TokenTree::Literal(lit)) = value else {
                    let span = value.map_or(key.span(), TokenTree::span);
                    return Err(Error::new(
                        span,
                        "the name is a string literal: `name = \"...\"`",
                    ));
                };
                if !is_str_literal(lit) {
                    return Err(Error::new(
                        lit.span(),
                        "the name is a string literal: `name = \"...\"`",
                    ));
                }
                if is_empty_str(lit) {
                    return Err(Error::new(lit.span(), "the name must not be empty"));
                }
                if out.name.is_some() {
                    return Err(Error::new(key.span(), "`name` is given twice"));
                }
                out.name = Some(lit.clone());
                i += 3;
            }
            "skip" => {
                out.skip = Some(key.span());
                i += 1;
            }
            _ => return Err(Error::new(key.span(), EXPECTED)),
        }
        if i < tokens.len() {
            if !is_punct(tokens.get(i), ',') {
                return Err(Error::new(tokens[i].span(), EXPECTED));
            }
            i += 1;
        }
    }
    if let (Some(skip), Some(_)) = (out.skip, &out.name) {
        return Err(Error::new(skip, "`skip` and `name` do not go together"));
    }
    Ok(out)
}

/// A `"..."` or `r"..."`/`r#"..."#` literal (not a byte or C string).
fn is_str_literal(lit: &Literal) -> bool {
    let s = lit.to_string();
    s.starts_with('"') || s.starts_with("r\"") || s.starts_with("r#")
}

fn is_empty_str(lit: &Literal) -> bool {
    let s = lit.to_string();
    let s = s.trim_start_matches('r').trim_matches('#');
    s == "\"\""
}
