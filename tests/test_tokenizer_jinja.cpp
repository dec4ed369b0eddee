// Unit tests of the Jinja interpreter: expressions, filters, tests, loops, macros, whitespace control, errors
// with positions and the limits that stop hostile templates.
#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <string>

#include "tokenizer/jinja.h"
#include "util/error.h"

namespace df::jinja {
namespace {

using json = nlohmann::ordered_json;

std::string render(std::string_view source, const json& context = json::object(),
                   const RenderOptions& options = {}) {
  return Template(source).render(context, options);
}

// The df::Error message of rendering (or parsing) `source`; fails the test when there is none.
std::string error_of(std::string_view source, const json& context = json::object(),
                     const RenderOptions& options = {}) {
  try {
    render(source, context, options);
  } catch (const df::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for: " << source;
  return "";
}

TEST(JinjaTest, PrintsValuesAsPython) {
  EXPECT_EQ(render("{{ 42 }}|{{ -3 }}|{{ 1.5 }}|{{ 2.0 }}|{{ 1e-5 }}|{{ 1e16 }}"),
            "42|-3|1.5|2.0|1e-05|1e+16");
  EXPECT_EQ(render("{{ true }}|{{ False }}|{{ none }}|{{ None }}|{{ missing }}|"), "True|False|None|None||");
  EXPECT_EQ(render("{{ [1, 'a', none, true, 2.5] }}"), "[1, 'a', None, True, 2.5]");
  EXPECT_EQ(render("{{ {'k': 'v', 'n': [1]} }}"), "{'k': 'v', 'n': [1]}");
  EXPECT_EQ(render("{{ [\"it's\"] }}"), "[\"it's\"]");
  EXPECT_EQ(render("{{ x }}|{{ y }}|{{ z }}", {{"x", 7}, {"y", 0.25}, {"z", {{"a", nullptr}}}}),
            "7|0.25|{'a': None}");
}

TEST(JinjaTest, StringLiteralsAndEscapes) {
  EXPECT_EQ(render(R"({{ 'a\nb' }}|{{ "q\"q" }}|{{ 'x' 'y' }}|{{ '\u00e9\x41' }}|{{ '\d' }})"),
            "a\nb|q\"q|xy|\xc3\xa9"
            "A|\\d");
}

TEST(JinjaTest, Arithmetic) {
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }}"),
            "7 9 3 -4 1 2");
  EXPECT_EQ(render("{{ 7 / 2 }} {{ 4 / 2 }} {{ 2 ** 10 }} {{ 2 ** 3 ** 2 }} {{ 1 + 0.5 }} {{ true + 1 }}"),
            "3.5 2.0 1024 64 1.5 2");
  EXPECT_EQ(render("{{ 'ab' * 3 }}|{{ [1] * 2 }}|{{ [1] + [2] }}|{{ -(3) }}|{{ - 2 + 5 }}"),
            "ababab|[1, 1]|[1, 2]|-3|3");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none ~ missing }}"), "a1None");
  // llama.cpp concatenates none/undefined as nothing and anything else as its printed form.
  EXPECT_EQ(render("{{ 'a' + none }}|{{ missing + 'b' }}|{{ 'n' + 1 }}|{{ 'd' + {'k': true} }}"),
            "a|b|n1|d{'k': True}");
}

TEST(JinjaTest, ComparisonsAndLogic) {
  EXPECT_EQ(render("{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' != 'b' }} {{ [1, "
                   "2] == [1, 2] }}"),
            "True False True True True True");
  EXPECT_EQ(render("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'x' not in ['y'] }} {{ 'x' "
                   "in nope }}"),
            "True True True True False");
  EXPECT_EQ(render("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ not none }} {{ '' or [] or 'z' }} {{ 'a' < 'b' }}"),
            "x y True z True");
  EXPECT_EQ(render("{{ 'yes' if 1 else 'no' }}|{{ 'yes' if 0 else 'no' }}|{{ 'only' if false }}|"),
            "yes|no||");
}

TEST(JinjaTest, PrecedenceFollowsJinja2) {
  // Tests and filters bind tighter than arithmetic and "not".
  EXPECT_EQ(render("{{ not x is defined }}|{{ xs|length - 1 }}|{{ 'a' + 'b'|upper }}", {{"xs", {1, 2, 3}}}),
            "True|2|aB");
  EXPECT_EQ(render("{{ -3|abs }}|{{ 1 + 2 is odd }}"), "3|1");
}

TEST(JinjaTest, SubscriptsAndSlices) {
  const json ctx = {{"xs", {1, 2, 3, 4, 5}}, {"s", "héllo"}, {"d", {{"a", {{"b", 7}}}}}};
  EXPECT_EQ(
      render("{{ xs[0] }} {{ xs[-1] }} {{ xs[1:3] }} {{ xs[::-1] }} {{ xs[::2] }} {{ xs[:-2] }} {{ xs[9] }}|",
             ctx),
      "1 5 [2, 3] [5, 4, 3, 2, 1] [1, 3, 5] [1, 2, 3] |");
  EXPECT_EQ(render("{{ s[1] }} {{ s[1:3] }} {{ s[::-1] }} {{ s|length }}", ctx), "é él olléh 5");
  EXPECT_EQ(render("{{ d.a.b }} {{ d['a']['b'] }} {{ d.x.y.z }}|{{ xs.0 }}", ctx), "7 7 |1");
}

TEST(JinjaTest, DictAttributesPreferMethodsLikePython) {
  const json ctx = {{"spec", {{"items", {{"type", "string"}}}, {"type", "array"}}}};
  // spec.items is dict.items (why real templates write spec['items']); spec['items'] is the key.
  EXPECT_EQ(render("{{ spec['items']['type'] }} {{ spec.type }} {{ spec.items() | length }}", ctx),
            "string array 2");
  EXPECT_EQ(render("{% set ns = namespace(items=3) %}{{ ns.items }}"), "3");
}

TEST(JinjaTest, StringMethods) {
  EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ "
                   "'a.b.c'.rsplit('.', 1) }}"),
            "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c'] ['a.b', 'c']");
  EXPECT_EQ(render("[{{ '  x \n'.strip() }}] [{{ 'xxhixx'.strip('x') }}] [{{ '\nhi\n'.lstrip('\n') }}] [{{ "
                   "'hi  '.rstrip() }}]"),
            "[x] [hi] [hi\n] [hi]");
  EXPECT_EQ(
      render(
          "{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'aaa'.replace('a', 'b', 2) }}"),
      "True True bba");
  EXPECT_EQ(render("{{ 'héllo'.find('l') }} {{ 'abc'.find('z') }} {{ 'hello world'.title() }} {{ "
                   "'aXb'.upper() }} {{ 'aXb'.lower() }}"),
            "2 -1 Hello World AXB axb");
  EXPECT_EQ(
      render("{{ '{} and {name}'.format(1, name='x') }} {{ ', '.join(['a', 'b']) }} {{ 'a-b'.count('-') }}"),
      "1 and x a, b 1");
  EXPECT_EQ(
      render("{{ '<think>r</think>ans'.split('</think>')[-1] }}|{{ 'x</think>'.split('</think>')[0] }}"),
      "ans|x");
}

TEST(JinjaTest, Filters) {
  const json users = {{{"name", "bob"}, {"role", "user"}, {"age", 30}},
                      {{"name", "Al"}, {"role", "assistant"}, {"age", 25}},
                      {{"name", "cy"}, {"role", "user"}, {"age", 35}}};
  const json ctx = {{"users", users}, {"d", {{"b", 1}, {"A", 2}, {"c", 3}}}};
  EXPECT_EQ(render("{{ users|map(attribute='name')|join(', ') }}", ctx), "bob, Al, cy");
  EXPECT_EQ(render("{{ users|selectattr('role', 'equalto', 'user')|map(attribute='name')|list }}", ctx),
            "['bob', 'cy']");
  EXPECT_EQ(render("{{ users|rejectattr('role', 'eq', 'user')|map(attribute='name')|first }}", ctx), "Al");
  EXPECT_EQ(render("{{ users|sort(attribute='age', reverse=true)|map(attribute='name')|join }}", ctx),
            "cybobAl");
  EXPECT_EQ(render("{{ users|map(attribute='name')|sort|join(',') }}", ctx),
            "Al,bob,cy");  // case-insensitive
  EXPECT_EQ(render("{{ d|dictsort }}", ctx), "[['A', 2], ['b', 1], ['c', 3]]");
  EXPECT_EQ(render("{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('even')|list }} {{ [0, 1, "
                   "'']|select|list }}"),
            "[1, 3] [1, 3] [1]");
  EXPECT_EQ(render("{{ ['a', 'A', 'b', 'a']|unique|list }} {{ [3, 1, 2]|max }} {{ [3, 1, 2]|min }} {{ [1, 2, "
                   "3]|sum }}"),
            "['a', 'b'] 3 1 6");
  EXPECT_EQ(render("{{ [1, 2]|first }} {{ [1, 2]|last }} {{ 'abc'|first }} {{ []|first }}| {{ [1, 2, "
                   "3]|reverse|list }}"),
            "1 2 a | [3, 2, 1]");
  EXPECT_EQ(render("{{ '42'|int + 1 }} {{ '3.5'|float }} {{ 'x'|int }} {{ 3.9|int }} {{ 5|string ~ '!' }} {{ "
                   "-2|abs }}"),
            "43 3.5 0 3 5! 2");
  EXPECT_EQ(render("{{ 2.5|round }} {{ 3.14159|round(2) }} {{ 2.1|round(method='ceil') }}"), "2.0 3.14 3.0");
  EXPECT_EQ(
      render("{{ '  x  '|trim }}|{{ 'hello world'|capitalize }}|{{ \"they're-here\"|title }}|{{ 'a<b'|e }}"),
      "x|Hello world|They're-Here|a&lt;b");
  EXPECT_EQ(render("{{ 'a\nb\n\nc'|indent(2) }}|{{ 'a\nb'|indent(2, true) }}"), "a\n  b\n\n  c|  a\n  b");
  EXPECT_EQ(
      render(
          "{{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ 'one two  three'|wordcount }} {{ {'a': 1}|items|list }}"),
      "[[1, 2], [3, 4], [5]] 3 [['a', 1]]");
  EXPECT_EQ(render("{{ 'abc'|list }} {{ 'abc'|length }} {{ [1, 2]|count }} {{ {'a': 1}|length }} {{ "
                   "missing|length }}"),
            "['a', 'b', 'c'] 3 2 1 0");
  EXPECT_EQ(render("{{ 'a.b'|replace('.', '-') }} {{ 'x'|upper }} {{ 'X'|lower }} {{ 'x'|safe }}"),
            "a-b X x x");
}

TEST(JinjaTest, DefaultFilterReplacesOnlyUndefinedUnlessBoolean) {
  EXPECT_EQ(render("{{ missing|default('d') }}|{{ none|default('d') }}|{{ ''|default('d') }}|{{ "
                   "''|default('d', true) }}|{{ missing|d }}|"),
            "d|None||d||");
}

TEST(JinjaTest, ToJsonMatchesLlamaCpp) {
  const json ctx = {{"v", {{"b", 1}, {"a", {true, nullptr, "x\"y\n\u00e9"}}, {"f", 0.5}}}};
  // Python json.dumps separators, insertion order, non-ASCII kept.
  EXPECT_EQ(render("{{ v|tojson }}", ctx),
            "{\"b\": 1, \"a\": [true, null, \"x\\\"y\\n\xc3\xa9\"], \"f\": 0.5}");
  EXPECT_EQ(
      render("{{ v|tojson(indent=2) }}", ctx),
      "{\n  \"b\": 1,\n  \"a\": [\n    true,\n    null,\n    \"x\\\"y\\n\xc3\xa9\"\n  ],\n  \"f\": 0.5\n}");
  EXPECT_EQ(render("{{ v|tojson(sort_keys=true, separators=(',', ':')) }}", ctx),
            "{\"a\":[true,null,\"x\\\"y\\n\xc3\xa9\"],\"b\":1,\"f\":0.5}");
  EXPECT_EQ(render("{{ 'é😀'|tojson(ensure_ascii=true) }} {{ []|tojson }} {{ {}|tojson(indent=4) }} {{ "
                   "missing|tojson }}"),
            "\"\\u00e9\\ud83d\\ude00\" [] {} null");
  EXPECT_EQ(render("{{ '\x01\t'|tojson }}"), "\"\\u0001\\t\"");
}

TEST(JinjaTest, Tests) {
  EXPECT_EQ(render("{{ x is defined }} {{ y is undefined }} {{ none is none }} {{ 'a' is string }} {{ 1 is "
                   "number }} {{ 1.5 is float }}",
                   {{"x", 1}}),
            "True True True True True True");
  EXPECT_EQ(render("{{ {} is mapping }} {{ [] is iterable }} {{ 'a' is sequence }} {{ 1 is iterable }} {{ "
                   "true is true }} {{ 1 is true }}"),
            "True True True False True False");
  EXPECT_EQ(render("{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 3 is equalto 3 }} {{ 2 is in "
                   "[1, 2] }} {{ x is not none }}"),
            "True True True True True True");
  EXPECT_EQ(render("{{ 'ab' is lower }} {{ 'AB' is upper }} {{ 1 is boolean }} {{ false is false }} {{ x is "
                   "integer }}",
                   {{"x", 2}}),
            "True True False True True");
}

TEST(JinjaTest, ForLoops) {
  const json ctx = {{"xs", {"a", "b", "c"}}};
  EXPECT_EQ(
      render(
          "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ x }}"
          "{{ '^' if loop.first }}{{ '$' if loop.last }}{{ loop.length }};{% endfor %}",
          ctx),
      "1032a^3;2121b3;3210c$3;");
  EXPECT_EQ(
      render(
          "{% for x in xs %}{{ loop.previtem }}-{{ loop.nextitem }}{{ loop.cycle('o', 'e') }} {% endfor %}",
          ctx),
      "-bo a-ce b-o ");
  EXPECT_EQ(
      render(
          "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in missing %}x{% else %}none{% endfor %}"),
      "empty|none");
  EXPECT_EQ(render("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}{{ loop.length }}{% endfor %}"), "2242");
  EXPECT_EQ(render("{% for x in [1, 2, 3, 4, 5] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% "
                   "break %}{% endif %}{{ x }}{% endfor %}"),
            "13");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"), "a=1;b=2;");
  EXPECT_EQ(render("{% for k in {'a': 1, 'b': 2} %}{{ k }}{% endfor %}|{% for k, v in {'a': 1} %}{{ k }}{{ v "
                   "}}{% endfor %}"),
            "ab|a1");
  EXPECT_EQ(render("{% for (a, b) in [[1, 2], [3, 4]] %}{{ a + b }},{% endfor %}"), "3,7,");
  EXPECT_EQ(render("{% for c in 'hé' %}[{{ c }}]{% endfor %}"), "[h][é]");
  EXPECT_EQ(render("{% for i in range(3) %}{% for j in range(i) %}{{ loop.index }}{% endfor %}{{ loop.index "
                   "}}|{% endfor %}"),
            "1|12|123|");
  EXPECT_EQ(render("{{ range(5) }} {{ range(1, 7, 2) }} {{ range(3, 0, -1) }}"),
            "[0, 1, 2, 3, 4] [1, 3, 5] [3, 2, 1]");
}

TEST(JinjaTest, ScopingAndNamespaces) {
  // A set inside a loop does not leak out of it; a namespace attribute does.
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}"),
            "24|1");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}{% endfor "
                   "%}{{ ns.n }}"),
            "6");
  EXPECT_EQ(render("{% if true %}{% set y = 5 %}{% endif %}{{ y }}"), "5");
  EXPECT_EQ(render("{% set a, b = [1, 2] %}{{ a }}{{ b }}|{% set t = 1, 2 %}{{ t }}"), "12|[1, 2]");
  EXPECT_EQ(render("{% set messages = messages[1:] %}{{ messages }}", {{"messages", {1, 2, 3}}}), "[2, 3]");
  EXPECT_EQ(render("{% set block | upper %}hi {{ 'there' }}{% endset %}[{{ block }}]"), "[HI THERE]");
  EXPECT_EQ(
      render(
          "{% set xs = [] %}{% do xs.append(1) %}{{ xs.append(2) }}{{ xs }} {{ {'a': 1}.get('b', 'dflt') }}"),
      "None[1, 2] dflt");
}

TEST(JinjaTest, Macros) {
  EXPECT_EQ(render("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
                   "{{ greet('Al') }} {{ greet('Bo', punct='?') }} {{ greet(name='Cy') }}"),
            "Hi Al! Hi Bo? Hi Cy!");
  EXPECT_EQ(render("{% macro f(n) %}{% if n <= 1 %}1{% else %}{{ n * f(n - 1)|int }}{% endif %}{% endmacro "
                   "%}{{ f(5) }}"),
            "120");
  EXPECT_EQ(render("{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}"),
            "1[2]{'k': 3}");
  EXPECT_EQ(render("{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}"
                   "{% call wrap('b') %}bold{% endcall %}"),
            "<b>bold</b>");
  EXPECT_EQ(render("{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}"
                   "{% call(item) each([1, 2]) %}[{{ item }}]{% endcall %}"),
            "[1][2]");
  // A macro sees globals set after its definition, at call time.
  EXPECT_EQ(render("{% macro show() %}{{ late }}{% endmacro %}{% set late = 'L' %}{{ show() }}"), "L");
  EXPECT_EQ(render("{% filter upper %}abc{{ 'd' }}{% endfilter %}"), "ABCD");
}

TEST(JinjaTest, WhitespaceControlMatchesLlamaCpp) {
  EXPECT_EQ(render("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(render("a\n  {%- if true %}\n  b\n  {%- endif %}\nc"), "a  bc");
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: indentation before a block tag goes.
  EXPECT_EQ(render("{% if true %}\n    x\n    {% endif %}\ny"), "    x\ny");
  EXPECT_EQ(render("{% for i in [1, 2] %}\n  {{ i }}\n{% endfor %}\n"), "  1\n  2\n");
  // Expression tags are not trimmed; comments are, like blocks.
  EXPECT_EQ(render("{{ 'x' }}\n{# c #}\n  {# d #}\ny"), "x\ny");
  EXPECT_EQ(render("a {% if true %}b{% endif %} c"), "a b c");
  EXPECT_EQ(render("{%+ if true %}x{% endif +%}\n"), "x");
  EXPECT_EQ(render("line\n"), "line");  // one trailing newline is dropped
  EXPECT_EQ(render("a\r\nb\r\n\r\n"), "a\nb\n");
  EXPECT_EQ(render("{% raw %}{{ not rendered }}{% endraw %}"), "{{ not rendered }}");
  EXPECT_EQ(render("{%- generation -%} kept {%- endgeneration -%}"), "kept");
}

TEST(JinjaTest, StrftimeNowUsesTheGivenClock) {
  setenv("TZ", "UTC", 1);
  tzset();
  RenderOptions options;
  options.now = 1749988800;  // 2025-06-15 12:00:00 UTC
  EXPECT_EQ(render("{{ strftime_now('%Y-%m-%d') }} {{ strftime_now('%d %b %Y') }}", json::object(), options),
            "2025-06-15 15 Jun 2025");
}

TEST(JinjaTest, RaiseException) {
  const std::string message = error_of("ok\n{{ raise_exception('Only user and assistant roles!') }}");
  EXPECT_NE(message.find("raise_exception()"), std::string::npos) << message;
  EXPECT_NE(message.find("line 2, column 4"), std::string::npos) << message;
  EXPECT_NE(message.find("Only user and assistant roles!"), std::string::npos) << message;
}

TEST(JinjaTest, SyntaxErrorsNameLineAndColumn) {
  auto expect_syntax_error = [](std::string_view source, const std::string& where, const std::string& what) {
    const std::string message = error_of(source);
    EXPECT_NE(message.find("syntax error"), std::string::npos) << message;
    EXPECT_NE(message.find(where), std::string::npos) << message;
    EXPECT_NE(message.find(what), std::string::npos) << message;
  };
  expect_syntax_error("hello\n  {{ x ", "line 2, column 3", "missing '}}'");
  expect_syntax_error("{% if x %}\nno end", "line 1, column 1", "'if' block is never closed");
  expect_syntax_error("{% for x in y %}{% endif %}", "line 1, column 17",
                      "unknown or unexpected tag 'endif'");
  expect_syntax_error("{{ 'abc }}", "line 1, column 4", "unterminated string");
  expect_syntax_error("ab\ncd {{ 1 + }}", "line 2, column 11", "expected an expression");
  expect_syntax_error("{% frobnicate %}", "line 1, column 1", "unknown or unexpected tag 'frobnicate'");
  expect_syntax_error("{# open", "line 1, column 1", "unclosed comment");
  expect_syntax_error("{{ a $ b }}", "line 1, column 6", "unexpected character '$'");
  expect_syntax_error("{% break %}", "line 1, column 1", "outside of a for loop");
  expect_syntax_error("{% include 'x' %}", "line 1, column 1", "not supported");
}

TEST(JinjaTest, RuntimeErrorsNameLineAndColumn) {
  std::string message = error_of("line one\n  {{ undefined_function(1) }}");
  EXPECT_NE(message.find("line 2, column 6"), std::string::npos) << message;
  EXPECT_NE(message.find("'undefined_function' is undefined"), std::string::npos) << message;
  message = error_of("{{ 1 // 0 }}");
  EXPECT_NE(message.find("division by zero"), std::string::npos) << message;
  message = error_of("{{ [1] - 1 }}");
  EXPECT_NE(message.find("unsupported operand types for -: list and integer"), std::string::npos) << message;
  message = error_of("{{ x|nosuchfilter }}");
  EXPECT_NE(message.find("unknown filter 'nosuchfilter'"), std::string::npos) << message;
  message = error_of("{% set s = 'str' %}{% set s.attr = 1 %}");
  EXPECT_NE(message.find("cannot set attribute 'attr' of a string"), std::string::npos) << message;
  message = error_of("{% for a, b in [[1, 2, 3]] %}{% endfor %}");
  EXPECT_NE(message.find("cannot unpack 3 values into 2 names"), std::string::npos) << message;
  message = error_of("{{ 'x' in none }}");
  EXPECT_NE(message.find("not iterable"), std::string::npos) << message;
}

TEST(JinjaTest, RunawayRecursionIsAnError) {
  const std::string message = error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}");
  EXPECT_NE(message.find("levels deep"), std::string::npos) << message;
}

TEST(JinjaTest, DeepNestingIsRefusedAtParse) {
  const std::string parens = std::string(5000, '(') + "1" + std::string(5000, ')');
  EXPECT_NE(error_of("{{ " + parens + " }}").find("nests too deeply"), std::string::npos);
  std::string chain = "{{ 1";
  for (int i = 0; i < 5000; ++i) chain += " + 1";
  EXPECT_NE(error_of(chain + " }}").find("nests too deeply"), std::string::npos);
  std::string blocks;
  for (int i = 0; i < 1000; ++i) blocks += "{% if true %}";
  EXPECT_NE(error_of(blocks).find("nests too deeply"), std::string::npos);
  // Within the limit all is well.
  EXPECT_EQ(render("{{ " + std::string(30, '(') + "2" + std::string(30, ')') + " }}"), "2");
}

TEST(JinjaTest, LoopAndSizeLimits) {
  RenderOptions options;
  options.limits.max_loop_iterations = 1000;
  EXPECT_NE(error_of("{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}",
                     json::object(), options)
                .find("loop iterations"),
            std::string::npos);
  options = {};
  options.limits.max_list_items = 100;
  EXPECT_NE(error_of("{{ range(1000) }}", json::object(), options).find("over the limit"), std::string::npos);
  EXPECT_NE(
      error_of(
          "{% set xs = [] %}{% for i in range(99) %}{% do xs.append(i) %}{% do xs.append(i) %}{% endfor %}",
          json::object(), options)
          .find("over the limit"),
      std::string::npos);
  options = {};
  options.limits.max_string_bytes = 1000;
  EXPECT_NE(
      error_of(
          "{% set ns = namespace(s='ab') %}{% for i in range(20) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
          json::object(), options)
          .find("over the limit"),
      std::string::npos);
  EXPECT_NE(error_of("{{ 'x' * 5000 }}", json::object(), options).find("over the limit"), std::string::npos);
  EXPECT_NE(
      error_of("{% for i in range(2000) %}x{% endfor %}", json::object(), options).find("over the limit"),
      std::string::npos);
}

TEST(JinjaTest, DeeplyNestedAndCyclicValuesFailCleanly) {
  // A list nested 50000 levels deep is built, refused when printed, and released without deep recursion.
  EXPECT_NE(
      error_of("{% set ns = namespace(v=[]) %}{% for i in range(50000) %}{% set ns.v = [ns.v] %}{% endfor %}"
               "{{ ns.v }}")
          .find("nested too deeply"),
      std::string::npos);
  EXPECT_NE(error_of("{% set xs = [] %}{% do xs.append(xs) %}{{ xs|tojson }}").find("nested too deeply"),
            std::string::npos);
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.self = ns %}ok"), "ok");
}

TEST(JinjaTest, TemplateIsReusable) {
  const Template t(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}");
  EXPECT_EQ(t.render({{"messages", {1, 2}}}), "2");
  EXPECT_EQ(t.render({{"messages", {1, 2, 3}}}), "3");
}

}  // namespace
}  // namespace df::jinja
