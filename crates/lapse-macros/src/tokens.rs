//! Small helpers over `proc_macro` token trees, and errors as
//! `compile_error!` tokens.

use proc_macro::{Delimiter, Group, Ident, Literal, Punct, Spacing, Span, TokenStream, TokenTree};

pub fn is_ident(t: Option<&TokenTree>, name: &str) -> bool {
    matches!(t, Some(TokenTree::Ident(i)) if i.to_string() == name)
}

pub fn is_punct(t: Option<&TokenTree>, c: char) -> bool {
    matches!(t, Some(TokenTree::Punct(p)) if p.as_char() == c)
}

pub fn is_group(t: Option<&TokenTree>, d: Delimiter) -> bool {
    matches!(t, Some(TokenTree::Group(g)) if g.delimiter() == d)
}

/// An identifier's name without its `r#` (a raw identifier names the same
/// function).
pub fn ident_name(i: &Ident) -> String {
    let s = i.to_string();
    s.strip_prefix("r#")
        .map_or_else(|| s.clone(), str::to_owned)
}

/// Index just past the outer attributes (`#[...]`) starting at `from`.
pub fn skip_attributes(tokens: &[TokenTree], mut from: usize) -> usize {
    while is_punct(tokens.get(from), '#') && is_group(tokens.get(from + 1), Delimiter::Bracket) {
        from += 2;
    }
    from
}

/// Index just past a visibility (`pub`, `pub(crate)`, ...) at `from`.
pub fn skip_visibility(tokens: &[TokenTree], mut from: usize) -> usize {
    if is_ident(tokens.get(from), "pub") {
        from += 1;
        if is_group(tokens.get(from), Delimiter::Parenthesis) {
            from += 1;
        }
    }
    from
}

/// Tracks `<...>` nesting in a type or signature, where `<` and `>` are
/// separate punctuation tokens: `->` is not a closing bracket.
#[derive(Default)]
pub struct AngleDepth {
    depth: usize,
    after_minus: bool,
}

impl AngleDepth {
    /// Takes the next token; returns the depth after it.
    pub fn step(&mut self, t: &TokenTree) -> usize {
        let mut after_minus = false;
        if let TokenTree::Punct(p) = t {
            match p.as_char() {
                '<' => self.depth += 1,
                '>' if !self.after_minus => self.depth = self.depth.saturating_sub(1),
                '-' => after_minus = p.spacing() == Spacing::Joint,
                _ => {}
            }
        }
        self.after_minus = after_minus;
        self.depth
    }

    pub fn depth(&self) -> usize {
        self.depth
    }
}

/// Source-like text of tokens, for names: `Wrapper<T>`, `&'a Bar`,
/// `dyn Trait`, `(A, B)`.
pub fn text(tokens: &[TokenTree]) -> String {
    let mut out = String::new();
    let mut word_before = false;
    for t in tokens {
        match t {
            TokenTree::Ident(_) | TokenTree::Literal(_) => {
                if word_before {
                    out.push(' ');
                }
                out.push_str(&t.to_string());
                word_before = true;
            }
            TokenTree::Punct(p) => {
                out.push(p.as_char());
                if matches!(p.as_char(), ',' | ';') {
                    out.push(' ');
                }
                // (a lifetime's name follows its apostrophe without a space)
                word_before = false;
            }
            TokenTree::Group(g) => {
                let inner: Vec<TokenTree> = g.stream().into_iter().collect();
                let (open, close) = match g.delimiter() {
                    Delimiter::Parenthesis => ("(", ")"),
                    Delimiter::Bracket => ("[", "]"),
                    Delimiter::Brace => ("{", "}"),
                    Delimiter::None => ("", ""),
                };
                if word_before && g.delimiter() == Delimiter::Brace {
                    out.push(' ');
                }
                out.push_str(open);
                out.push_str(&text(&inner));
                out.push_str(close);
                word_before = false;
            }
        }
    }
    out
}

/// `s` as the inside of a string literal.
pub fn escape(s: &str) -> String {
    s.chars().flat_map(char::escape_default).collect()
}

/// Parses Rust source that this crate writes (never user input).
pub fn parse(source: &str) -> TokenStream {
    source.parse().unwrap_or_else(|_| {
        compile_error_at(
            Span::call_site(),
            "lapse: internal error in #[lapse::profile]",
        )
    })
}

/// Gives every token of `stream` (recursively) the span `span`.
pub fn respan(stream: TokenStream, span: Span) -> TokenStream {
    stream
        .into_iter()
        .map(|mut t| {
            if let TokenTree::Group(g) = &t {
                let mut g2 = Group::new(g.delimiter(), respan(g.stream(), span));
                g2.set_span(span);
                t = TokenTree::Group(g2);
            } else {
                t.set_span(span);
            }
            t
        })
        .collect()
}

/// A usage error: a message and the tokens it is about.
pub struct Error {
    pub span: Span,
    pub message: String,
}

impl Error {
    pub fn new(span: Span, message: impl Into<String>) -> Error {
        Error {
            span,
            message: message.into(),
        }
    }

    pub fn to_tokens(&self) -> TokenStream {
        compile_error_at(self.span, &self.message)
    }
}

/// `::core::compile_error!{"message"}`, pointing at `span`.
fn compile_error_at(span: Span, message: &str) -> TokenStream {
    let mut lit = Literal::string(message);
    lit.set_span(span);
    let tokens: Vec<TokenTree> = vec![
        Punct::new(':', Spacing::Joint).into(),
        Punct::new(':', Spacing::Alone).into(),
        Ident::new("core", span).into(),
        Punct::new(':', Spacing::Joint).into(),
        Punct::new(':', Spacing::Alone).into(),
        Ident::new("compile_error", span).into(),
        Punct::new('!', Spacing::Alone).into(),
        Group::new(Delimiter::Brace, TokenTree::from(lit).into()).into(),
    ];
    respan(tokens.into_iter().collect(), span)
}
