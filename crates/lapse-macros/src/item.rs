//! Reading the items the attribute goes on, by hand: a function (free, a
//! method, a trait's default method) and an impl block split into its
//! items. Only what instrumenting needs is read: qualifiers, the name, the
//! body; the impl's self type and trait as tokens.

use proc_macro::{Delimiter, Ident, Span, TokenTree};

use crate::tokens::{
    is_group, is_ident, is_punct, skip_attributes, skip_visibility, AngleDepth, Error,
};

/// A function item's tokens and where its parts are.
pub struct FnItem {
    pub tokens: Vec<TokenTree>,
    pub name: Ident,
    /// `const fn` / `async fn`: where the qualifier is written.
    pub is_const: Option<Span>,
    pub is_async: Option<Span>,
    /// The index of the body (the last token), or `None` for a declaration
    /// (`fn f();`).
    pub body: Option<usize>,
}

/// Where `fn` is in an item starting at `tokens[0]`, if it is a function:
/// after its attributes, visibility and qualifiers (`const`, `async`,
/// `unsafe`, `safe`, `extern "abi"`, `default`).
fn fn_keyword(tokens: &[TokenTree]) -> Option<usize> {
    let mut i = skip_visibility(tokens, skip_attributes(tokens, 0));
    loop {
        match tokens.get(i) {
            Some(TokenTree::Ident(id)) => match id.to_string().as_str() {
                "fn" => return Some(i),
                "const" | "async" | "unsafe" | "safe" | "default" => i += 1,
                "extern" => {
                    i += 1;
                    if matches!(tokens.get(i), Some(TokenTree::Literal(_))) {
                        i += 1;
                    }
                }
                _ => return None,
            },
            _ => return None,
        }
    }
}

impl FnItem {
    /// The function in `tokens` (one whole item), or `None` if it is not one.
    pub fn parse(tokens: Vec<TokenTree>) -> Option<FnItem> {
        let at = fn_keyword(&tokens)?;
        let Some(TokenTree::Ident(name)) = tokens.get(at + 1) else {
            return None;
        };
        let name = name.clone();
        let qualifier = |q: &str| {
            tokens[..at]
                .iter()
                .rev()
                .take_while(|t| !is_group(Some(t), Delimiter::Bracket))
                .find(|t| is_ident(Some(t), q))
                .map(TokenTree::span)
        };
        let (is_const, is_async) = (qualifier("const"), qualifier("async"));
        let body = (is_group(tokens.last(), Delimiter::Brace) && tokens.len() > at + 2)
            .then(|| tokens.len() - 1);
        Some(FnItem {
            tokens,
            name,
            is_const,
            is_async,
            body,
        })
    }

    /// Its outer attributes' token ranges (`#` and `[...]`), in order.
    pub fn attributes(&self) -> Vec<std::ops::Range<usize>> {
        let mut out = Vec::new();
        let mut i = 0;
        while is_punct(self.tokens.get(i), '#')
            && is_group(self.tokens.get(i + 1), Delimiter::Bracket)
        {
            out.push(i..i + 2);
            i += 2;
        }
        out
    }
}

/// An impl block: its header and its items.
pub struct ImplBlock {
    /// Everything before the body (attributes, `impl`, generics, trait,
    /// type, where clause).
    pub header: Vec<TokenTree>,
    /// The trait's path as written, for `impl Trait for Type`.
    pub trait_path: Option<Vec<TokenTree>>,
    pub self_type: Vec<TokenTree>,
    pub body: proc_macro::Group,
    /// The body's items, each as its tokens (a lone `;` or an inner
    /// attribute is an item here too).
    pub items: Vec<Vec<TokenTree>>,
}

impl ImplBlock {
    /// The impl block in `tokens`, `Ok(None)` if they are not one.
    pub fn parse(tokens: Vec<TokenTree>) -> Result<Option<ImplBlock>, Error> {
        let mut i = skip_visibility(&tokens, skip_attributes(&tokens, 0));
        while is_ident(tokens.get(i), "unsafe") || is_ident(tokens.get(i), "default") {
            i += 1;
        }
        if !is_ident(tokens.get(i), "impl") {
            return Ok(None);
        }
        let Some(TokenTree::Group(body)) = tokens.last() else {
            return Ok(None);
        };
        if body.delimiter() != Delimiter::Brace {
            return Ok(None);
        }
        let body = body.clone();
        let header = tokens[..tokens.len() - 1].to_vec();
        i += 1;
        // generics: impl<...>
        if is_punct(header.get(i), '<') {
            let mut angles = AngleDepth::default();
            while i < header.len() {
                let depth = angles.step(&header[i]);
                i += 1;
                if depth == 0 {
                    break;
                }
            }
        }
        if is_ident(header.get(i), "const") {
            i += 1; // (impl const Trait, unstable)
        }
        // trait `for` type, up to a where clause, at bracket depth 0
        let mut angles = AngleDepth::default();
        let (mut for_at, mut where_at) = (None, header.len());
        for (j, t) in header.iter().enumerate().skip(i) {
            let depth = angles.depth();
            angles.step(t);
            if depth != 0 {
                continue;
            }
            if is_ident(Some(t), "for") && !is_punct(header.get(j + 1), '<') && for_at.is_none() {
                for_at = Some(j);
            }
            if is_ident(Some(t), "where") {
                where_at = j;
                break;
            }
        }
        let (trait_path, self_type) = match for_at {
            Some(f) => {
                let mut t = &header[i..f];
                if is_punct(t.first(), '!') {
                    t = &t[1..];
                }
                (Some(t.to_vec()), header[f + 1..where_at].to_vec())
            }
            None => (None, header[i..where_at].to_vec()),
        };
        if self_type.is_empty() {
            return Err(Error::new(
                body.span(),
                "#[lapse::profile]: cannot read this impl block's type",
            ));
        }
        let items = split_items(&body.stream().into_iter().collect::<Vec<_>>());
        Ok(Some(ImplBlock {
            header,
            trait_path,
            self_type,
            body,
            items,
        }))
    }
}

/// Splits an impl body into items: a function ends with its body (the first
/// `{...}` outside `<...>` after its name) or `;`; a macro call `m! {...}`
/// with its braces; anything else at `;`.
fn split_items(tokens: &[TokenTree]) -> Vec<Vec<TokenTree>> {
    let mut items = Vec::new();
    let mut start = 0;
    while start < tokens.len() {
        let rest = &tokens[start..];
        let end = if is_punct(rest.first(), '#') && is_punct(rest.get(1), '!') {
            // an inner attribute: `#` `!` `[...]`
            3.min(rest.len())
        } else if let Some(at) = fn_keyword(rest) {
            let mut angles = AngleDepth::default();
            let mut end = rest.len();
            for (j, t) in rest.iter().enumerate().skip(at + 2) {
                let depth = angles.depth();
                angles.step(t);
                if depth == 0 && (is_group(Some(t), Delimiter::Brace) || is_punct(Some(t), ';')) {
                    end = j + 1;
                    break;
                }
            }
            end
        } else {
            let body = skip_attributes(rest, 0);
            let mut end = rest.len();
            let mut path_only = true;
            for (j, t) in rest.iter().enumerate().skip(body) {
                if is_punct(Some(t), ';') {
                    end = j + 1;
                    break;
                }
                if path_only
                    && j > body
                    && is_punct(rest.get(j - 1), '!')
                    && is_group(Some(t), Delimiter::Brace)
                {
                    end = j + 1;
                    break;
                }
                path_only &= matches!(t, TokenTree::Ident(_))
                    || is_punct(Some(t), ':')
                    || is_punct(Some(t), '!');
            }
            end
        };
        items.push(rest[..end].to_vec());
        start += end;
    }
    items
}
