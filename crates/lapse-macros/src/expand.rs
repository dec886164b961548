//! What the attribute writes: a site record and a guard at the top of each
//! profiled function's body, and the function's name.

use proc_macro::{Delimiter, Group, Ident, Punct, Spacing, Span, TokenStream, TokenTree};

use crate::args::{self, Args};
use crate::item::{FnItem, ImplBlock};
use crate::tokens::{escape, ident_name, is_group, is_ident, is_punct, parse, respan, text, Error};
use crate::with_error;

/// How a profiled function is named when no `name = "..."` is given.
pub enum Naming<'a> {
    /// A free function (or a method whose impl block the macro cannot see).
    Free,
    /// A method of an impl block carrying the attribute.
    Method {
        self_type: &'a [TokenTree],
        trait_path: Option<&'a [TokenTree]>,
    },
}

/// `#[lapse::profile]` on a function: the function with its probe, or
/// an error (and the function as it was, so that no other error follows).
pub fn function(item: FnItem, args: &Args, naming: &Naming<'_>) -> TokenStream {
    if let Some(span) = args.skip {
        return with_error(
            item.tokens,
            Error::new(
                span,
                "`skip` is for a method of an impl block that carries #[lapse::profile]",
            ),
        );
    }
    match instrument(item, args.name.as_ref().map(ToString::to_string), naming) {
        Ok(tokens) | Err((tokens, None)) => tokens.into_iter().collect(),
        Err((tokens, Some(e))) => with_error(tokens, e),
    }
}

/// `#[lapse::profile]` on an impl block: every method with a body gets a
/// probe, except `const fn` and `async fn` methods and those marked
/// `#[lapse::profile(skip)]`; a method's own `#[lapse::profile(name =
/// "...")]` names it.
pub fn impl_block(block: ImplBlock) -> TokenStream {
    let naming = Naming::Method {
        self_type: &block.self_type,
        trait_path: block.trait_path.as_deref(),
    };
    let mut body = TokenStream::new();
    let mut errors = TokenStream::new();
    for tokens in &block.items {
        let Some(mut item) = FnItem::parse(tokens.clone()) else {
            body.extend(tokens.iter().cloned());
            continue;
        };
        let args = match take_own_attribute(&mut item) {
            Ok(a) => a,
            Err(e) => {
                errors.extend(e.to_tokens());
                body.extend(item.tokens);
                continue;
            }
        };
        let explicit = args.as_ref().is_some_and(|a| a.name.is_some());
        let leave = args.as_ref().is_some_and(|a| a.skip.is_some())
            || (!explicit && (item.is_const.is_some() || item.is_async.is_some()));
        if leave {
            body.extend(item.tokens);
            continue;
        }
        let name = args.and_then(|a| a.name).map(|l| l.to_string());
        match instrument(item, name, &naming) {
            Ok(tokens) => body.extend(tokens),
            Err((tokens, e)) => {
                body.extend(tokens);
                if let Some(e) = e {
                    errors.extend(e.to_tokens());
                }
            }
        }
    }
    let mut group = Group::new(Delimiter::Brace, body);
    group.set_span(block.body.span());
    let mut out: TokenStream = block.header.into_iter().collect();
    out.extend([TokenTree::Group(group)]);
    out.extend(errors);
    out
}

/// Removes a method's own `#[lapse::profile(...)]` (the impl's attribute
/// does its work) and returns its arguments.
fn take_own_attribute(item: &mut FnItem) -> Result<Option<Args>, Error> {
    for range in item.attributes().into_iter().rev() {
        let Some(TokenTree::Group(attr)) = item.tokens.get(range.start + 1) else {
            continue;
        };
        let inner: Vec<TokenTree> = attr.stream().into_iter().collect();
        let path_len = if is_ident(inner.first(), "profile") {
            1
        } else {
            let skip = if is_punct(inner.first(), ':') { 2 } else { 0 };
            let lapse = is_ident(inner.get(skip), "lapse")
                && is_punct(inner.get(skip + 1), ':')
                && is_punct(inner.get(skip + 2), ':')
                && is_ident(inner.get(skip + 3), "profile");
            if !lapse {
                continue;
            }
            skip + 4
        };
        let args = match &inner[path_len..] {
            [] => TokenStream::new(),
            [TokenTree::Group(g)] if g.delimiter() == Delimiter::Parenthesis => g.stream(),
            _ => continue, // (some other `profile` attribute)
        };
        let args = args::parse(args)?;
        item.tokens.drain(range);
        if let Some(body) = item.body.as_mut() {
            *body -= 2;
        }
        return Ok(Some(args));
    }
    Ok(None)
}

type Failed = (Vec<TokenTree>, Option<Error>);

/// The function with the guard as its body's first statement. `name`: an
/// explicit name (a string literal's source).
fn instrument(
    mut item: FnItem,
    name: Option<String>,
    naming: &Naming<'_>,
) -> Result<Vec<TokenTree>, Failed> {
    if let Some(span) = item.is_const {
        let e = Error::new(
            span,
            "#[lapse::profile] cannot go on a `const fn`: a probe does not run in constant evaluation",
        );
        return Err((item.tokens, Some(e)));
    }
    if let Some(span) = item.is_async {
        let e = Error::new(
            span,
            "#[lapse::profile] does not support `async fn` (its time between polls is not one call): profile the functions it calls, or put lapse::scope!(...) in a block that does not `.await`",
        );
        return Err((item.tokens, Some(e)));
    }
    let Some(body_at) = item.body else {
        let e = Error::new(
            item.name.span(),
            "#[lapse::profile] needs a function with a body",
        );
        return Err((item.tokens, Some(e)));
    };
    let name = name.unwrap_or_else(|| default_name(&item.name, naming));
    let Some(TokenTree::Group(body)) = item.tokens.get(body_at) else {
        return Err((item.tokens, None));
    };
    let stream: Vec<TokenTree> = body.stream().into_iter().collect();
    // inner attributes (`#![...]`, `//!`) stay first
    let mut inner_end = 0;
    while is_punct(stream.get(inner_end), '#')
        && is_punct(stream.get(inner_end + 1), '!')
        && is_group(stream.get(inner_end + 2), Delimiter::Bracket)
    {
        inner_end += 3;
    }
    let mut new_body: TokenStream = stream[..inner_end].iter().cloned().collect();
    new_body.extend(guard(&name, item.name.span()));
    new_body.extend(stream[inner_end..].iter().cloned());
    let mut group = Group::new(Delimiter::Brace, new_body);
    group.set_span(body.span());
    item.tokens[body_at] = TokenTree::Group(group);
    Ok(item.tokens)
}

/// `let <hidden> = { <site static>; Guard::enter(&SITE) };`: the site
/// records `name` (the source of a `&'static str` constant expression) at
/// the line of `at`.
fn guard(name: &str, at: Span) -> TokenStream {
    let line = respan(parse("::core::line!()"), at);
    let block = parse(&format!(
        r#"
        const __LAPSE_NAME: &str = {name};
        const __LAPSE_FILE: &str = ::core::file!();
        #[cfg_attr(target_os = "linux", unsafe(link_section = "lapse_sites"))]
        #[used]
        static __LAPSE_SITE: ::lapse::__private::Site<{{ __LAPSE_NAME.len() + __LAPSE_FILE.len() }}> =
            ::lapse::__private::Site::new(::lapse::__private::KIND_FUNCTION, __LAPSE_LINE, __LAPSE_NAME, __LAPSE_FILE);
        ::lapse::__private::Guard::enter(&__LAPSE_SITE)
        "#
    ));
    let block = replace_ident(block, "__LAPSE_LINE", &line);
    [
        TokenTree::Ident(Ident::new("let", Span::call_site())),
        // (hygienic: the function's own code cannot name it)
        TokenTree::Ident(Ident::new("__lapse_guard", Span::mixed_site())),
        TokenTree::Punct(Punct::new('=', Spacing::Alone)),
        TokenTree::Group(Group::new(Delimiter::Brace, block)),
        TokenTree::Punct(Punct::new(';', Spacing::Alone)),
    ]
    .into_iter()
    .collect()
}

/// `stream` with every identifier `placeholder` replaced by `with`.
fn replace_ident(stream: TokenStream, placeholder: &str, with: &TokenStream) -> TokenStream {
    let mut out = TokenStream::new();
    for t in stream {
        match t {
            TokenTree::Ident(i) if i.to_string() == placeholder => out.extend(with.clone()),
            TokenTree::Group(g) => {
                let mut g2 =
                    Group::new(g.delimiter(), replace_ident(g.stream(), placeholder, with));
                g2.set_span(g.span());
                out.extend([TokenTree::Group(g2)]);
            }
            t => out.extend([t]),
        }
    }
    out
}

/// The name expression of a function without `name = "..."`.
fn default_name(fn_name: &Ident, naming: &Naming<'_>) -> String {
    let method = escape(&ident_name(fn_name));
    match naming {
        Naming::Free => format!(r#"::core::concat!(::core::module_path!(), "::{method}")"#),
        Naming::Method {
            self_type,
            trait_path,
        } => {
            let ty = match last_segment(self_type) {
                // a path: the module's, then the type's last segment
                Some(seg) => format!(r#"::core::module_path!(), "::{}""#, escape(&text(seg))),
                None => format!(r#""{}""#, escape(&text(self_type))),
            };
            let inherent_path = last_segment(self_type).is_some();
            match trait_path {
                Some(tr) => {
                    let tr = last_segment(tr).unwrap_or(tr);
                    format!(
                        r#"::core::concat!("<", {ty}, " as {}>::{method}")"#,
                        escape(&text(tr))
                    )
                }
                None if inherent_path => format!(r#"::core::concat!({ty}, "::{method}")"#),
                None => format!(
                    r#"::core::concat!(::core::module_path!(), "::<", {ty}, ">::{method}")"#
                ),
            }
        }
    }
}

/// The last segment (with its generic arguments) of a path type
/// (`a::b::C<T>` → `C<T>`); `None` for other types (`&T`, `dyn T`, tuples).
fn last_segment(tokens: &[TokenTree]) -> Option<&[TokenTree]> {
    let mut start = 0;
    let mut angles = crate::tokens::AngleDepth::default();
    let mut expect_ident = true;
    let mut i = 0;
    while i < tokens.len() {
        let t = &tokens[i];
        let depth = angles.depth();
        angles.step(t);
        if depth == 0 {
            if is_punct(Some(t), ':') && is_punct(tokens.get(i + 1), ':') {
                angles.step(&tokens[i + 1]);
                i += 2;
                start = i;
                expect_ident = true;
                continue;
            }
            if expect_ident {
                match t {
                    TokenTree::Ident(id)
                        if !matches!(id.to_string().as_str(), "dyn" | "impl" | "fn") =>
                    {
                        expect_ident = false;
                    }
                    _ => return None,
                }
            } else if !is_punct(Some(t), '<') {
                return None;
            }
        }
        i += 1;
    }
    (!expect_ident).then_some(&tokens[start..])
}
