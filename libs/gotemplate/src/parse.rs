//! Go's `text/template/parse`: the lexer and the parser, with Go's rules for trim markers,
//! comments, literals, variables (declared before use, scoped to their control structure),
//! functions (known at parse time), pipelines and control structures. One file of about 1,400
//! lines, as Go's `lex.go` and `parse.go` are one package: the parser drives the lexer token by
//! token, and the node types are shared by both.

use std::collections::HashMap;

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Text(String),
    LeftDelim,
    RightDelim,
    Space,
    Assign,
    Declare,
    Pipe,
    Char(char),
    Str(String),
    RawStr(String),
    Variable(String),
    CharConst(String),
    Number(String),
    Complex(String),
    Field(String),
    Ident(String),
    Dot,
    Bool(bool),
    Nil,
    LeftParen,
    RightParen,
    Block,
    Break,
    Continue,
    Define,
    Else,
    End,
    If,
    Range,
    Template,
    With,
    Eof,
}

/// A parse error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError(pub String);

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

fn is_alnum(c: char) -> bool {
    c == '_' || c.is_alphabetic() || c.is_numeric()
}

const SPACE_CHARS: &[char] = &[' ', '\t', '\r', '\n'];

fn has_left_trim(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 2 && b[0] == b'-' && is_space(b[1] as char)
}

fn has_right_trim(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 2 && is_space(b[0] as char) && b[1] == b'-'
}

struct Lexer<'a> {
    input: &'a str,
    pos: usize,
    start: usize,
    paren_depth: i32,
    items: Vec<Tok>,
}

fn lex(input: &str) -> Result<Vec<Tok>, ParseError> {
    let mut l = Lexer {
        input,
        pos: 0,
        start: 0,
        paren_depth: 0,
        items: Vec::new(),
    };
    l.run()?;
    Ok(l.items)
}

impl Lexer<'_> {
    fn rest(&self) -> &str {
        &self.input[self.pos..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn next(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn err<T>(&self, msg: impl Into<String>) -> Result<T, ParseError> {
        Err(ParseError(msg.into()))
    }

    fn at_right_delim(&self) -> (bool, bool) {
        let r = self.rest();
        if has_right_trim(r) && r[2..].starts_with("}}") {
            return (true, true);
        }
        (r.starts_with("}}"), false)
    }

    fn at_terminator(&self) -> bool {
        match self.peek() {
            None => true,
            Some(c) if is_space(c) => true,
            Some('.' | ',' | '|' | ':' | ')' | '(') => true,
            _ => self.rest().starts_with("}}"),
        }
    }

    fn word(&self) -> String {
        self.input[self.start..self.pos].to_owned()
    }

    fn emit(&mut self, t: Tok) {
        self.items.push(t);
        self.start = self.pos;
    }

    fn run(&mut self) -> Result<(), ParseError> {
        loop {
            // Text.
            match self.rest().find("{{") {
                Some(x) => {
                    if x > 0 {
                        self.pos += x;
                        let mut text = &self.input[self.start..self.pos];
                        if has_left_trim(&self.input[self.pos + 2..]) {
                            text = text.trim_end_matches(SPACE_CHARS);
                        }
                        if !text.is_empty() {
                            self.items.push(Tok::Text(text.to_owned()));
                        }
                        self.start = self.pos;
                    }
                    self.left_delim()?;
                }
                None => {
                    self.pos = self.input.len();
                    if self.pos > self.start {
                        let t = self.word();
                        self.items.push(Tok::Text(t));
                    }
                    self.items.push(Tok::Eof);
                    return Ok(());
                }
            }
        }
    }

    fn left_delim(&mut self) -> Result<(), ParseError> {
        self.pos += 2;
        let trim = has_left_trim(self.rest());
        let after = if trim { 2 } else { 0 };
        if self.input[self.pos + after..].starts_with("/*") {
            self.pos += after;
            return self.comment();
        }
        self.items.push(Tok::LeftDelim);
        self.pos += after;
        self.start = self.pos;
        self.paren_depth = 0;
        self.inside_action()
    }

    fn comment(&mut self) -> Result<(), ParseError> {
        self.pos += 2;
        let Some(x) = self.rest().find("*/") else {
            return self.err("unclosed comment");
        };
        self.pos += x + 2;
        let (delim, trim) = self.at_right_delim();
        if !delim {
            return self.err("comment ends before closing delimiter");
        }
        if trim {
            self.pos += 2;
        }
        self.pos += 2;
        if trim {
            let r = self.rest();
            self.pos += r.len() - r.trim_start_matches(SPACE_CHARS).len();
        }
        self.start = self.pos;
        Ok(())
    }

    fn right_delim(&mut self) {
        let (_, trim) = self.at_right_delim();
        if trim {
            self.pos += 2;
        }
        self.pos += 2;
        self.items.push(Tok::RightDelim);
        if trim {
            let r = self.rest();
            self.pos += r.len() - r.trim_start_matches(SPACE_CHARS).len();
        }
        self.start = self.pos;
    }

    fn inside_action(&mut self) -> Result<(), ParseError> {
        loop {
            let (delim, _) = self.at_right_delim();
            if delim {
                if self.paren_depth == 0 {
                    self.right_delim();
                    return Ok(());
                }
                return self.err("unclosed left paren");
            }
            self.start = self.pos;
            let Some(c) = self.next() else {
                return self.err("unclosed action");
            };
            match c {
                c if is_space(c) => {
                    self.pos -= 1;
                    // A run of spaces; a single space before " -}}" belongs to the delimiter.
                    let mut n = 0;
                    while self.peek().is_some_and(is_space) {
                        self.next();
                        n += 1;
                    }
                    let before = &self.input[self.pos - 1..];
                    if has_right_trim(before) && before[2..].starts_with("}}") {
                        self.pos -= 1;
                        if n == 1 {
                            self.start = self.pos;
                            continue;
                        }
                    }
                    self.emit(Tok::Space);
                }
                '=' => self.emit(Tok::Assign),
                ':' => {
                    if self.next() != Some('=') {
                        return self.err("expected :=");
                    }
                    self.emit(Tok::Declare);
                }
                '|' => self.emit(Tok::Pipe),
                '"' => {
                    loop {
                        match self.next() {
                            Some('\\') => match self.next() {
                                None | Some('\n') => {
                                    return self.err("unterminated quoted string");
                                }
                                _ => {}
                            },
                            None | Some('\n') => return self.err("unterminated quoted string"),
                            Some('"') => break,
                            _ => {}
                        }
                    }
                    let w = self.word();
                    self.emit(Tok::Str(w));
                }
                '`' => {
                    loop {
                        match self.next() {
                            None => return self.err("unterminated raw quoted string"),
                            Some('`') => break,
                            _ => {}
                        }
                    }
                    let w = self.word();
                    self.emit(Tok::RawStr(w));
                }
                '$' => {
                    if self.at_terminator() {
                        self.emit(Tok::Variable("$".into()));
                    } else {
                        self.field_or_variable(true)?;
                    }
                }
                '\'' => {
                    loop {
                        match self.next() {
                            Some('\\') => match self.next() {
                                None | Some('\n') => {
                                    return self.err("unterminated character constant");
                                }
                                _ => {}
                            },
                            None | Some('\n') => {
                                return self.err("unterminated character constant");
                            }
                            Some('\'') => break,
                            _ => {}
                        }
                    }
                    let w = self.word();
                    self.emit(Tok::CharConst(w));
                }
                '.' if !self.peek().is_some_and(|c| c.is_ascii_digit()) => {
                    self.field_or_variable(false)?;
                }
                '.' | '+' | '-' | '0'..='9' => {
                    self.pos = self.start;
                    self.number()?;
                }
                c if is_alnum(c) => {
                    self.pos = self.start;
                    self.identifier()?;
                }
                '(' => {
                    self.paren_depth += 1;
                    self.emit(Tok::LeftParen);
                }
                ')' => {
                    self.paren_depth -= 1;
                    if self.paren_depth < 0 {
                        return self.err("unexpected right paren");
                    }
                    self.emit(Tok::RightParen);
                }
                c if c.is_ascii() && !c.is_ascii_control() => self.emit(Tok::Char(c)),
                c => return self.err(format!("unrecognized character in action: {c:?}")),
            }
        }
    }

    fn field_or_variable(&mut self, variable: bool) -> Result<(), ParseError> {
        if self.at_terminator() {
            self.emit(if variable {
                Tok::Variable("$".into())
            } else {
                Tok::Dot
            });
            return Ok(());
        }
        while self.peek().is_some_and(is_alnum) {
            self.next();
        }
        if !self.at_terminator() {
            return self.err(format!("bad character {:?}", self.peek().unwrap_or(' ')));
        }
        let w = self.word();
        self.emit(if variable {
            Tok::Variable(w)
        } else {
            Tok::Field(w)
        });
        Ok(())
    }

    fn identifier(&mut self) -> Result<(), ParseError> {
        while self.peek().is_some_and(is_alnum) {
            self.next();
        }
        if !self.at_terminator() {
            return self.err(format!("bad character {:?}", self.peek().unwrap_or(' ')));
        }
        let w = self.word();
        let t = match w.as_str() {
            "block" => Tok::Block,
            "break" => Tok::Break,
            "continue" => Tok::Continue,
            "define" => Tok::Define,
            "else" => Tok::Else,
            "end" => Tok::End,
            "if" => Tok::If,
            "range" => Tok::Range,
            "nil" => Tok::Nil,
            "template" => Tok::Template,
            "with" => Tok::With,
            "true" => Tok::Bool(true),
            "false" => Tok::Bool(false),
            _ => Tok::Ident(w),
        };
        self.emit(t);
        Ok(())
    }

    fn accept(&mut self, valid: &str) -> bool {
        if self.peek().is_some_and(|c| valid.contains(c)) {
            self.next();
            true
        } else {
            false
        }
    }

    fn accept_run(&mut self, valid: &str) {
        while self.accept(valid) {}
    }

    fn scan_number(&mut self) -> bool {
        self.accept("+-");
        let mut digits = "0123456789_";
        if self.accept("0") {
            if self.accept("xX") {
                digits = "0123456789abcdefABCDEF_";
            } else if self.accept("oO") {
                digits = "01234567_";
            } else if self.accept("bB") {
                digits = "01_";
            }
        }
        self.accept_run(digits);
        if self.accept(".") {
            self.accept_run(digits);
        }
        if digits.len() == 11 && self.accept("eE") {
            self.accept("+-");
            self.accept_run("0123456789_");
        }
        if digits.len() == 23 && self.accept("pP") {
            self.accept("+-");
            self.accept_run("0123456789_");
        }
        self.accept("i");
        if self.peek().is_some_and(is_alnum) {
            self.next();
            return false;
        }
        true
    }

    fn number(&mut self) -> Result<(), ParseError> {
        if !self.scan_number() {
            return self.err(format!("bad number syntax: {:?}", self.word()));
        }
        if let Some('+' | '-') = self.peek() {
            if !self.scan_number() || !self.input[..self.pos].ends_with('i') {
                return self.err(format!("bad number syntax: {:?}", self.word()));
            }
            let w = self.word();
            self.emit(Tok::Complex(w));
            return Ok(());
        }
        let w = self.word();
        self.emit(Tok::Number(w));
        Ok(())
    }
}

/// A number literal with what it can be, as Go's parser records it.
#[derive(Clone, Debug)]
pub(crate) struct Number {
    /// As written.
    pub(crate) text: String,
    /// Fits an int64.
    pub(crate) is_int: bool,
    /// Fits a uint64.
    pub(crate) is_uint: bool,
    /// Is (or converts exactly to) a float64.
    pub(crate) is_float: bool,
    /// A complex literal.
    pub(crate) is_complex: bool,
    /// The int64 value.
    pub(crate) int: i64,
    /// The float64 value.
    pub(crate) float: f64,
}

/// One operand of a command.
#[derive(Clone, Debug)]
pub(crate) enum Arg {
    /// `.A.B`
    Field(Vec<String>),
    /// `(pipe).A.B`
    Chain(Box<Arg>, Vec<String>),
    /// `$x.A.B` (the name first)
    Variable(Vec<String>),
    /// `.`
    Dot,
    /// `nil`
    Nil,
    /// `true`/`false`
    Bool(bool),
    /// A number or character literal.
    Number(Number),
    /// A string literal (unquoted).
    Str(Vec<u8>),
    /// A function name.
    Ident(String),
    /// A parenthesized pipeline.
    Pipe(Box<Pipe>),
}

/// A command: a function, a field or an operand, with its arguments.
#[derive(Clone, Debug)]
pub(crate) struct Cmd {
    /// The operands, the first being what is called or evaluated.
    pub(crate) args: Vec<Arg>,
}

/// A pipeline, possibly declaring or assigning variables.
#[derive(Clone, Debug, Default)]
pub(crate) struct Pipe {
    /// `=` rather than `:=`.
    pub(crate) is_assign: bool,
    /// The variables declared.
    pub(crate) decl: Vec<String>,
    /// The commands, each one's result the last argument of the next.
    pub(crate) cmds: Vec<Cmd>,
}

/// `if`, `with`, `range`.
#[derive(Clone, Debug)]
pub(crate) struct Branch {
    /// The pipeline.
    pub(crate) pipe: Pipe,
    /// The body.
    pub(crate) list: Vec<Node>,
    /// The `else` part.
    pub(crate) else_list: Option<Vec<Node>>,
}

/// A node of the tree.
#[derive(Clone, Debug)]
pub(crate) enum Node {
    /// Text, copied.
    Text(String),
    /// `{{pipeline}}`
    Action(Pipe),
    /// `{{if}}`
    If(Branch),
    /// `{{with}}`
    With(Branch),
    /// `{{range}}`
    Range(Branch),
    /// `{{template "name" pipeline}}`
    Template(String, Option<Pipe>),
    /// `{{break}}`
    Break,
    /// `{{continue}}`
    Continue,
}

/// A parsed template: its root and the templates it defines.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tree {
    /// The root.
    pub(crate) root: Vec<Node>,
    /// Templates defined with `define` and `block`.
    pub(crate) defined: HashMap<String, Vec<Node>>,
}

enum Item {
    Node(Node),
    End,
    Else,
}

struct Parser<'f> {
    toks: Vec<Tok>,
    pos: usize,
    vars: Vec<String>,
    range_depth: usize,
    has_func: &'f dyn Fn(&str) -> bool,
    defined: HashMap<String, Vec<Node>>,
    depth: usize,
}

/// How deep parenthesized pipelines and control structures may nest. Go allows 10,000
/// parentheses and any depth of control structures, on a stack that grows to a gigabyte; here the
/// walk runs on the caller's thread, so nesting is bounded (far above what a template needs).
const MAX_NESTING: usize = 100;

/// Parses `text`; `has_func` says which function names exist (Go refuses an unknown one when
/// parsing).
pub(crate) fn parse(text: &str, has_func: &dyn Fn(&str) -> bool) -> Result<Tree, ParseError> {
    let toks = lex(text)?;
    let mut p = Parser {
        toks,
        pos: 0,
        vars: vec!["$".into()],
        range_depth: 0,
        has_func,
        defined: HashMap::new(),
        depth: 0,
    };
    let root = p.parse_root()?;
    Ok(Tree {
        root,
        defined: p.defined,
    })
}

fn err<T>(msg: impl Into<String>) -> Result<T, ParseError> {
    Err(ParseError(msg.into()))
}

impl Parser<'_> {
    fn peek(&self) -> &Tok {
        self.toks.get(self.pos).unwrap_or(&Tok::Eof)
    }

    fn next(&mut self) -> Tok {
        let t = self.peek().clone();
        if self.pos < self.toks.len() {
            self.pos += 1;
        }
        t
    }

    fn backup(&mut self) {
        self.pos -= 1;
    }

    fn next_non_space(&mut self) -> Tok {
        loop {
            let t = self.next();
            if t != Tok::Space {
                return t;
            }
        }
    }

    fn peek_non_space(&mut self) -> Tok {
        let t = self.next_non_space();
        self.backup();
        t
    }

    fn parse_root(&mut self) -> Result<Vec<Node>, ParseError> {
        let mut root = Vec::new();
        while *self.peek() != Tok::Eof {
            if *self.peek() == Tok::LeftDelim {
                let at = self.pos;
                self.next();
                if self.next_non_space() == Tok::Define {
                    self.definition()?;
                    continue;
                }
                self.pos = at;
            }
            match self.text_or_action()? {
                Item::Node(n) => root.push(n),
                Item::End => return err("unexpected {{end}}"),
                Item::Else => return err("unexpected {{else}}"),
            }
        }
        Ok(root)
    }

    fn definition(&mut self) -> Result<(), ParseError> {
        let name = match self.next_non_space() {
            Tok::Str(s) | Tok::RawStr(s) => String::from_utf8_lossy(&unquote(&s)?).into_owned(),
            _ => return err("unexpected token in define clause"),
        };
        if self.next_non_space() != Tok::RightDelim {
            return err("unexpected token in define clause");
        }
        let saved = std::mem::replace(&mut self.vars, vec!["$".into()]);
        let saved_depth = std::mem::replace(&mut self.range_depth, 0);
        let (list, end) = self.item_list()?;
        self.vars = saved;
        self.range_depth = saved_depth;
        if !matches!(end, Item::End) {
            return err("unexpected {{else}} in define clause");
        }
        self.add(name, list)
    }

    /// Go's `Tree.add`: a definition replaces an empty one; two that are not empty are an error.
    fn add(&mut self, name: String, list: Vec<Node>) -> Result<(), ParseError> {
        match self.defined.get(&name) {
            Some(old) if !is_empty_tree(old) => {
                if !is_empty_tree(&list) {
                    return err(format!("multiple definition of template {name:?}"));
                }
                Ok(())
            }
            _ => {
                self.defined.insert(name, list);
                Ok(())
            }
        }
    }

    fn item_list(&mut self) -> Result<(Vec<Node>, Item), ParseError> {
        let mut list = Vec::new();
        while self.peek_non_space() != Tok::Eof {
            match self.text_or_action()? {
                Item::Node(n) => list.push(n),
                other => return Ok((list, other)),
            }
        }
        err("unexpected EOF")
    }

    fn text_or_action(&mut self) -> Result<Item, ParseError> {
        match self.next_non_space() {
            Tok::Text(t) => Ok(Item::Node(Node::Text(t))),
            Tok::LeftDelim => self.action(),
            t => err(format!("unexpected {t:?} in input")),
        }
    }

    fn action(&mut self) -> Result<Item, ParseError> {
        match self.next_non_space() {
            Tok::Block => return self.block_control().map(Item::Node),
            Tok::Break | Tok::Continue => {
                let brk = self.toks[self.pos - 1] == Tok::Break;
                if self.next_non_space() != Tok::RightDelim {
                    return err("unexpected token in {{break}}/{{continue}}");
                }
                if self.range_depth == 0 {
                    return err("{{break}} or {{continue}} outside {{range}}");
                }
                return Ok(Item::Node(if brk { Node::Break } else { Node::Continue }));
            }
            Tok::Else => {
                let peek = self.peek_non_space();
                if peek == Tok::If || peek == Tok::With {
                    return Ok(Item::Else);
                }
                if self.next_non_space() != Tok::RightDelim {
                    return err("unexpected token in else");
                }
                return Ok(Item::Else);
            }
            Tok::End => {
                if self.next_non_space() != Tok::RightDelim {
                    return err("unexpected token in end");
                }
                return Ok(Item::End);
            }
            Tok::If => return self.control("if").map(|b| Item::Node(Node::If(b))),
            Tok::Range => return self.control("range").map(|b| Item::Node(Node::Range(b))),
            Tok::With => return self.control("with").map(|b| Item::Node(Node::With(b))),
            Tok::Template => return self.template_control().map(Item::Node),
            _ => {}
        }
        self.backup();
        let pipe = self.pipeline("command", &Tok::RightDelim)?;
        Ok(Item::Node(Node::Action(pipe)))
    }

    fn template_name(&mut self, t: Tok) -> Result<String, ParseError> {
        match t {
            Tok::Str(s) | Tok::RawStr(s) => Ok(String::from_utf8_lossy(&unquote(&s)?).into_owned()),
            _ => err("unexpected token in template clause"),
        }
    }

    fn template_control(&mut self) -> Result<Node, ParseError> {
        let t = self.next_non_space();
        let name = self.template_name(t)?;
        let pipe = if self.next_non_space() != Tok::RightDelim {
            self.backup();
            Some(self.pipeline("template clause", &Tok::RightDelim)?)
        } else {
            None
        };
        Ok(Node::Template(name, pipe))
    }

    fn block_control(&mut self) -> Result<Node, ParseError> {
        let t = self.next_non_space();
        let name = self.template_name(t)?;
        let pipe = self.pipeline("block clause", &Tok::RightDelim)?;
        let saved = std::mem::replace(&mut self.vars, vec!["$".into()]);
        let saved_depth = std::mem::replace(&mut self.range_depth, 0);
        let (list, end) = self.item_list()?;
        self.vars = saved;
        self.range_depth = saved_depth;
        if !matches!(end, Item::End) {
            return err("unexpected {{else}} in block clause");
        }
        self.add(name.clone(), list)?;
        Ok(Node::Template(name, Some(pipe)))
    }

    fn control(&mut self, context: &str) -> Result<Branch, ParseError> {
        if self.depth >= MAX_NESTING {
            return err("max nesting depth exceeded");
        }
        let mark = self.vars.len();
        self.depth += 1;
        let r = self.control_inner(context);
        self.depth -= 1;
        self.vars.truncate(mark);
        r
    }

    fn control_inner(&mut self, context: &str) -> Result<Branch, ParseError> {
        let pipe = self.pipeline(context, &Tok::RightDelim)?;
        if context == "range" {
            self.range_depth += 1;
        }
        let r = self.item_list();
        if context == "range" {
            self.range_depth -= 1;
        }
        let (list, next) = r?;
        let mut else_list = None;
        if let Item::Else = next {
            if context == "if" && *self.peek() == Tok::If {
                self.next();
                else_list = Some(vec![Node::If(self.control("if")?)]);
            } else if context == "with" && *self.peek() == Tok::With {
                self.next();
                else_list = Some(vec![Node::With(self.control("with")?)]);
            } else {
                let (l, next) = self.item_list()?;
                if !matches!(next, Item::End) {
                    return err("expected end; found {{else}}");
                }
                else_list = Some(l);
            }
        }
        Ok(Branch {
            pipe,
            list,
            else_list,
        })
    }

    fn pipeline(&mut self, context: &str, end: &Tok) -> Result<Pipe, ParseError> {
        let mut pipe = Pipe::default();
        'decls: loop {
            if let Tok::Variable(v) = self.peek_non_space() {
                self.next_non_space();
                let after = self.peek().clone();
                let next = self.peek_non_space();
                match next {
                    Tok::Assign | Tok::Declare => {
                        pipe.is_assign = next == Tok::Assign;
                        self.next_non_space();
                        pipe.decl.push(v.clone());
                        self.vars.push(v);
                    }
                    Tok::Char(',') => {
                        self.next_non_space();
                        pipe.decl.push(v.clone());
                        self.vars.push(v);
                        if context == "range" && pipe.decl.len() < 2 {
                            match self.peek_non_space() {
                                Tok::Variable(_) | Tok::RightDelim | Tok::RightParen => {
                                    continue 'decls;
                                }
                                _ => return err("range can only initialize variables"),
                            }
                        }
                        return err(format!("too many declarations in {context}"));
                    }
                    _ if after == Tok::Space => {
                        // Put back the variable (the space is still there).
                        self.rewind_to_variable();
                    }
                    _ => self.rewind_to_variable(),
                }
            }
            break;
        }
        loop {
            let t = self.next_non_space();
            if &t == end {
                if pipe.cmds.is_empty() {
                    return err(format!("missing value for {context}"));
                }
                for c in &pipe.cmds[1..] {
                    if matches!(
                        c.args[0],
                        Arg::Bool(_) | Arg::Dot | Arg::Nil | Arg::Number(_) | Arg::Str(_)
                    ) {
                        return err("non executable command in pipeline stage");
                    }
                }
                return Ok(pipe);
            }
            match t {
                Tok::Bool(_)
                | Tok::CharConst(_)
                | Tok::Complex(_)
                | Tok::Dot
                | Tok::Field(_)
                | Tok::Ident(_)
                | Tok::Number(_)
                | Tok::Nil
                | Tok::RawStr(_)
                | Tok::Str(_)
                | Tok::Variable(_)
                | Tok::LeftParen => {
                    self.backup();
                    let c = self.command()?;
                    pipe.cmds.push(c);
                }
                t => return err(format!("unexpected {t:?} in {context}")),
            }
        }
    }

    /// Moves back to the variable token just consumed by the declaration check.
    fn rewind_to_variable(&mut self) {
        while self.pos > 0 {
            self.pos -= 1;
            if matches!(self.toks[self.pos], Tok::Variable(_)) {
                return;
            }
        }
    }

    fn command(&mut self) -> Result<Cmd, ParseError> {
        let mut cmd = Cmd { args: Vec::new() };
        loop {
            self.peek_non_space();
            if let Some(op) = self.operand()? {
                cmd.args.push(op);
            }
            match self.next() {
                Tok::Space => continue,
                Tok::RightDelim | Tok::RightParen => self.backup(),
                Tok::Pipe => {}
                t => return err(format!("unexpected {t:?} in operand")),
            }
            break;
        }
        if cmd.args.is_empty() {
            return err("empty command");
        }
        Ok(cmd)
    }

    fn operand(&mut self) -> Result<Option<Arg>, ParseError> {
        let Some(node) = self.term()? else {
            return Ok(None);
        };
        if let Tok::Field(_) = self.peek() {
            let mut fields = Vec::new();
            while let Tok::Field(f) = self.peek().clone() {
                self.next();
                fields.push(f[1..].to_owned());
            }
            return match node {
                Arg::Field(mut f) => {
                    f.extend(fields);
                    Ok(Some(Arg::Field(f)))
                }
                Arg::Variable(mut v) => {
                    v.extend(fields);
                    Ok(Some(Arg::Variable(v)))
                }
                Arg::Bool(_) | Arg::Str(_) | Arg::Number(_) | Arg::Nil | Arg::Dot => {
                    err("unexpected . after term")
                }
                other => Ok(Some(Arg::Chain(Box::new(other), fields))),
            };
        }
        Ok(Some(node))
    }

    fn term(&mut self) -> Result<Option<Arg>, ParseError> {
        let t = self.next_non_space();
        Ok(Some(match t {
            Tok::Ident(name) => {
                if !(self.has_func)(&name) {
                    return err(format!("function {name:?} not defined"));
                }
                Arg::Ident(name)
            }
            Tok::Dot => Arg::Dot,
            Tok::Nil => Arg::Nil,
            Tok::Variable(v) => {
                let parts: Vec<String> = split_variable(&v);
                if !self.vars.contains(&parts[0]) {
                    return err(format!("undefined variable {:?}", parts[0]));
                }
                Arg::Variable(parts)
            }
            Tok::Field(f) => Arg::Field(f[1..].split('.').map(str::to_owned).collect()),
            Tok::Bool(b) => Arg::Bool(b),
            Tok::CharConst(s) => Arg::Number(number(&s, true)?),
            Tok::Number(s) | Tok::Complex(s) => Arg::Number(number(&s, false)?),
            Tok::LeftParen => {
                if self.depth >= MAX_NESTING {
                    return err("max expression depth exceeded");
                }
                self.depth += 1;
                let p = self.pipeline("parenthesized pipeline", &Tok::RightParen);
                self.depth -= 1;
                Arg::Pipe(Box::new(p?))
            }
            Tok::Str(s) | Tok::RawStr(s) => Arg::Str(unquote(&s)?),
            _ => {
                self.backup();
                return Ok(None);
            }
        }))
    }
}

fn split_variable(v: &str) -> Vec<String> {
    v.split('.').map(str::to_owned).collect()
}

fn is_empty_tree(list: &[Node]) -> bool {
    list.iter().all(|n| match n {
        Node::Text(t) => t.trim().is_empty(),
        _ => false,
    })
}

/// Go's `strconv.Unquote` for "…" and `…` literals.
pub(crate) fn unquote(s: &str) -> Result<Vec<u8>, ParseError> {
    let bad = || ParseError(format!("invalid syntax: {s}"));
    let b = s.as_bytes();
    if b.len() < 2 {
        return Err(bad());
    }
    if b[0] == b'`' {
        if !s.ends_with('`') {
            return Err(bad());
        }
        // Carriage returns are dropped from raw strings.
        return Ok(s[1..s.len() - 1].bytes().filter(|c| *c != b'\r').collect());
    }
    if b[0] != b'"' || b[b.len() - 1] != b'"' {
        return Err(bad());
    }
    let mut out = Vec::new();
    let mut rest = &s[1..s.len() - 1];
    while !rest.is_empty() {
        let (bytes, tail) = unquote_char(rest, b'"').ok_or_else(bad)?;
        out.extend_from_slice(&bytes);
        rest = tail;
    }
    Ok(out)
}

/// One character of a quoted literal: its bytes (a `\x` escape is one raw byte) and the rest.
fn unquote_char(s: &str, quote: u8) -> Option<(Vec<u8>, &str)> {
    let c = s.chars().next()?;
    if c as u32 == u32::from(quote) && (quote == b'\'' || quote == b'"') {
        return None;
    }
    if c != '\\' {
        if c == '\n' {
            return None;
        }
        let mut b = [0u8; 4];
        return Some((
            c.encode_utf8(&mut b).as_bytes().to_vec(),
            &s[c.len_utf8()..],
        ));
    }
    let s = &s[1..];
    let e = s.chars().next()?;
    let rest = &s[e.len_utf8()..];
    let simple = |b: u8| Some((vec![b], rest));
    match e {
        'a' => simple(7),
        'b' => simple(8),
        'f' => simple(12),
        'n' => simple(b'\n'),
        'r' => simple(b'\r'),
        't' => simple(b'\t'),
        'v' => simple(11),
        '\\' => simple(b'\\'),
        '\'' | '"' => {
            if e as u32 != u32::from(quote) {
                return None;
            }
            simple(e as u8)
        }
        'x' | 'u' | 'U' => {
            let n = match e {
                'x' => 2,
                'u' => 4,
                _ => 8,
            };
            let hex = rest.get(..n)?;
            if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            let v = u32::from_str_radix(hex, 16).ok()?;
            let rest = &rest[n..];
            if e == 'x' {
                return Some((vec![v as u8], rest));
            }
            let c = char::from_u32(v)?;
            let mut b = [0u8; 4];
            Some((c.encode_utf8(&mut b).as_bytes().to_vec(), rest))
        }
        '0'..='7' => {
            let oct = s.get(..3)?;
            if !oct.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
                return None;
            }
            let v = u32::from_str_radix(oct, 8).ok()?;
            if v > 255 {
                return None;
            }
            Some((vec![v as u8], &s[3..]))
        }
        _ => None,
    }
}

/// Go's `parse.newNumber`.
fn number(text: &str, is_char: bool) -> Result<Number, ParseError> {
    let mut n = Number {
        text: text.to_owned(),
        is_int: false,
        is_uint: false,
        is_float: false,
        is_complex: false,
        int: 0,
        float: 0.0,
    };
    if is_char {
        let inner = &text[1..];
        let (bytes, tail) =
            unquote_char(inner, b'\'').ok_or_else(|| ParseError("malformed character".into()))?;
        if tail != "'" {
            return err(format!("malformed character constant: {text}"));
        }
        let r = match std::str::from_utf8(&bytes) {
            Ok(s) if s.chars().count() == 1 => s.chars().next().map_or(0, |c| c as i64),
            _ if bytes.len() == 1 => i64::from(bytes[0]),
            _ => return err(format!("malformed character constant: {text}")),
        };
        n.int = r;
        n.is_int = true;
        n.is_uint = true;
        n.float = r as f64;
        n.is_float = true;
        return Ok(n);
    }
    if text.ends_with('i') {
        // Complex numbers are not supported by anything a template calls; Go accepts the
        // literal, and so do we, but no function takes it.
        n.is_complex = true;
        return Ok(n);
    }
    let u = parse_uint(text);
    if let Some(u) = u {
        n.is_uint = true;
        let _ = u;
    }
    if let Some(i) = parse_int(text) {
        n.is_int = true;
        n.int = i;
        if i == 0 {
            n.is_uint = true;
        }
    }
    if n.is_int {
        n.is_float = true;
        n.float = n.int as f64;
    } else if let Some(u) = u {
        n.is_float = true;
        n.float = u as f64;
    } else if let Some(f) = parse_float(text) {
        if !text.contains(['.', 'e', 'E', 'p', 'P']) {
            return err(format!("integer overflow: {text:?}"));
        }
        n.is_float = true;
        n.float = f;
        let t = go_f64_to_i64(f);
        if t as f64 == f {
            n.is_int = true;
            n.int = t;
        }
        if (0.0..18_446_744_073_709_551_616.0).contains(&f) && f.trunc() == f {
            n.is_uint = true;
        }
    }
    if !n.is_int && !n.is_uint && !n.is_float {
        return err(format!("illegal number syntax: {text:?}"));
    }
    Ok(n)
}

/// Go's `int64(f)` on amd64: out of range (or NaN) gives the most negative int64.
pub(crate) fn go_f64_to_i64(f: f64) -> i64 {
    if !(-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&f) {
        i64::MIN
    } else {
        f as i64
    }
}

/// Go's `strconv.underscoreOK`: underscores only between digits (a base prefix counts as one).
fn underscore_ok(s: &str) -> bool {
    let b = s.as_bytes();
    let b = match b.first() {
        Some(b'+' | b'-') => &b[1..],
        _ => b,
    };
    let mut saw = b'^';
    let mut i = 0;
    let mut hex = false;
    if b.len() >= 2 && b[0] == b'0' && matches!(b[1].to_ascii_lowercase(), b'b' | b'o' | b'x') {
        i = 2;
        saw = b'0';
        hex = b[1].eq_ignore_ascii_case(&b'x');
    }
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_digit() || (hex && c.is_ascii_hexdigit()) {
            saw = b'0';
        } else if c == b'_' {
            if saw != b'0' {
                return false;
            }
            saw = b'_';
        } else {
            if saw == b'_' {
                return false;
            }
            saw = b'!';
        }
        i += 1;
    }
    saw != b'_'
}

/// The sign, base and digits of an integer literal as Go's `strconv.ParseInt(s, 0, 64)` reads
/// it: `0x`, `0o`, `0b` or a leading `0` (octal) prefix, underscores between digits.
fn split_base(text: &str) -> Option<(bool, u32, String)> {
    if text.contains('_') && !underscore_ok(text) {
        return None;
    }
    let (neg, body) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let lower = body.to_ascii_lowercase().replace('_', "");
    let (base, digits) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d.to_owned())
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d.to_owned())
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d.to_owned())
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, lower[1..].to_owned())
    } else {
        (10, lower.clone())
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(base)) {
        return None;
    }
    Some((neg, base, digits))
}

fn parse_uint(text: &str) -> Option<u64> {
    let (neg, base, digits) = split_base(text)?;
    if neg || text.starts_with('+') {
        return None;
    }
    u64::from_str_radix(&digits, base).ok()
}

fn parse_int(text: &str) -> Option<i64> {
    let (neg, base, digits) = split_base(text)?;
    let u = u128::from_str_radix(&digits, base).ok()?;
    if neg {
        if u > 1 << 63 {
            return None;
        }
        Some((u as i128).wrapping_neg() as i64)
    } else {
        i64::try_from(u).ok()
    }
}

/// Go's `strconv.ParseFloat(s, 64)`: decimal and hexadecimal (`0x1p-2`) forms, underscores
/// between digits, `inf`/`infinity`/`nan` in any case.
pub(crate) fn parse_float(text: &str) -> Option<f64> {
    if text.contains('_') && !underscore_ok(text) {
        return None;
    }
    let t = text.replace('_', "");
    let (neg, body) = match t.as_bytes().first()? {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, &t[..]),
    };
    let signed = |f: f64| if neg { -f } else { f };
    match body.to_ascii_lowercase().as_str() {
        "inf" | "infinity" => return Some(signed(f64::INFINITY)),
        "nan" => return Some(f64::NAN),
        _ => {}
    }
    let lower = body.to_ascii_lowercase();
    if let Some(hex) = lower.strip_prefix("0x") {
        let (mant, exp) = hex.split_once('p')?;
        let exp: i32 = exp.parse().ok()?;
        let (int_part, frac) = mant.split_once('.').unwrap_or((mant, ""));
        if int_part.is_empty() && frac.is_empty() {
            return None;
        }
        let mut v = 0f64;
        for c in int_part.chars().chain(frac.chars()) {
            v = v * 16.0 + f64::from(c.to_digit(16)?);
        }
        let e = exp - 4 * frac.len() as i32;
        return Some(signed(v * 2f64.powi(e)));
    }
    if !body
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
    {
        return None;
    }
    body.parse::<f64>().ok().map(signed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> bool {
        parse(s, &|n| n == "printf" || n == "len").is_ok()
    }

    #[test]
    fn parse_errors_as_go() {
        for bad in [
            "{{",
            "{{ .Mode",
            "{{ .Mode }",
            "{{}}",
            "{{ end }}",
            "{{ else }}",
            "{{ ( .Mode }}",
            "{{ $undefined }}",
            "{{ 3.x }}",
            "{{ nosuch }}",
            "{{ \"unterminated }}",
            "{{ .Mode | \"x\" }}",
            "{{ if 1 }}{{ $x := 1 }}{{ end }}{{ $x }}",
            "{{ break }}",
            "{{/* a */ x }}",
            "{{ \"x\".y }}",
        ] {
            assert!(!ok(bad), "{bad:?} parsed");
        }
        for good in [
            "}}",
            "{{ .Mode.x }}",
            "{{ .Mode | }}",
            "{{ $x := 1 }}{{ $x }}",
            "{{ range $i, $v := . }}{{ $i }}{{ break }}{{ end }}",
            "{{- /* c */ -}}",
            "{{ 0x10 }}{{ 1e3 }}{{ 'a' }}{{ -1 }}",
            "{{ if 1 }}a{{ else if 2 }}b{{ else }}c{{ end }}",
            "{{ define \"x\" }}X{{ end }}{{ template \"x\" }}",
        ] {
            assert!(ok(good), "{good:?} did not parse");
        }
    }
}
