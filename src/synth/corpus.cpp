// The text the synthetic vocabularies learn their merges from: everyday English, chat turns, code in a few
// languages, structured data and a little of the other languages LFM2 and Qwen3 serve, so that frequent words
// and code fragments become single tokens. Written for this project.
#include <string_view>

#include "synth/vocab.h"

namespace df::synth {

namespace {

constexpr std::string_view kProse = R"corpus(
The morning was cold and bright, and the river moved slowly under the old stone bridge. People walked to work
with their hands in their pockets, and the bakery on the corner had already sold most of its bread. A small dog
waited by the door of the shop while its owner bought coffee, a newspaper and two apples.

When you want to learn something new, start with a small question and answer it well. Then ask the next question.
It is easier to build on a result you understand than on a result you only remember. Good teachers know this, and
good students learn it early: write down what you know, test it, and change your mind when the evidence says so.

The city was founded on the bank of a wide river more than eight hundred years ago. Its first houses were made of
wood, and a fire destroyed most of them in the year 1421. The people rebuilt the town in stone, and some of those
buildings are still standing today. The market square, the town hall and the church are the oldest of them.

She opened the window and looked at the garden. The rain had stopped, the grass was wet and green, and a few birds
were singing in the trees. It would be a good day for a walk along the river, she thought, or for reading a book
under the big tree at the end of the garden. She made a cup of tea and sat down at the table to think about it.

Water boils at one hundred degrees Celsius at sea level, and it freezes at zero degrees. At higher altitudes the
air pressure is lower, so water boils at a lower temperature, and cooking takes longer. This is why the time on a
recipe may not be right for a kitchen in the mountains.

To make a simple bread you need flour, water, salt and yeast. Mix the flour and the salt in a large bowl, add the
yeast and the warm water, and knead the dough for about ten minutes until it is smooth. Let it rise for an hour,
shape it, let it rise again, and bake it in a hot oven for thirty to forty minutes.

Our team met on Monday to review the plan for the next quarter. We agreed on three goals: make the system faster,
make it easier to use, and write better documentation. Each goal has an owner, a deadline and a way to measure
progress. We will meet again next week to check where we are and what we need to change.

The history of computing is a history of memory. Early machines could hold only a few thousand numbers, and every
program had to be written with that limit in mind. Today a laptop holds billions of numbers in memory and trillions
on its disk, but the same question remains: what do we keep close, and what do we fetch when we need it?

A mixture of experts model has many small networks, called experts, in each layer. A router looks at each token and
chooses a few experts for it, so only a small part of the model is used for any one token. The other experts can
stay on the disk until they are needed. With a good cache and a little prefetching, a large model can run on a
machine whose memory is much smaller than the model itself.

Reading from a fast solid state drive takes microseconds, reading from memory takes nanoseconds, and the difference
matters when a model needs gigabytes of weights for every token. The trick is to read each expert once, keep the
experts that are used often, and start the next read while the current layer is still computing.

There are many ways to measure a language model. Perplexity tells you how surprised the model is by a text. Accuracy
on a benchmark tells you how often it gives the right answer. Speed tells you how many tokens it produces in a
second, and memory tells you whether it fits on your machine at all. All four numbers matter to a user.

It was late in the evening when the train finally arrived. The station was almost empty, the lights were dim, and
the only sound was the wind in the wires above the tracks. He picked up his bag, stepped down onto the platform and
walked towards the exit, where his sister was waiting for him with a warm coat and a big smile.

Please remember to close the windows before you leave, turn off the lights, and lock the front door. The keys are
in the drawer next to the kitchen sink. If anything goes wrong, call me at any time; I will keep my phone with me.

The weather today will be mostly sunny with a light wind from the west. Temperatures will reach twenty two degrees
in the afternoon and fall to around twelve degrees at night. Tomorrow will be cloudy, and there is a chance of rain
in the evening. The weekend looks warm and dry, which is good news for the football match on Saturday.

I think that the best way to understand a system is to build a small version of it yourself. You will make
mistakes, and each mistake will teach you something that no book could. Then compare your version with the real
one, and ask why they are different. Sometimes the answer is a clever idea; sometimes it is an old accident.
)corpus";

constexpr std::string_view kChat = R"corpus(
User: What is the capital of France?
Assistant: The capital of France is Paris.
User: Can you help me write a short email to my manager?
Assistant: Of course. Here is a short draft: Hello, I wanted to let you know that the report is ready. I have
attached it to this message. Please let me know if you have any questions. Best regards.
User: How many days are there in a leap year?
Assistant: A leap year has 366 days, one more than a normal year, because February has 29 days instead of 28.
User: Why is the sky blue?
Assistant: Sunlight is made of many colours. When it passes through the air, the short blue waves are scattered in
every direction much more than the long red waves, so we see blue light coming from all parts of the sky.
User: Thank you! That was very helpful.
Assistant: You are welcome. Let me know if there is anything else I can do for you.
User: What is 2+2?
Assistant: 2+2 equals 4.
User: Explain what a cache is in one sentence.
Assistant: A cache is a small, fast memory that keeps copies of data you used recently, so the next time you need
them you do not have to fetch them from a slower place.
User: Write a haiku about the sea.
Assistant: Grey waves fold and break, / salt wind carries the gull's cry, / the tide keeps its time.
User: Should I use a list or a dictionary?
Assistant: Use a list when the order matters and you look items up by position; use a dictionary when you look
items up by a key, such as a name or an id.
)corpus";

constexpr std::string_view kCode = R"corpus(
def load_config(path):
    """Read a JSON config file and return it as a dictionary."""
    with open(path, "r", encoding="utf-8") as f:
        config = json.load(f)
    if "model" not in config:
        raise ValueError(f"missing key 'model' in {path}")
    return config


class ExpertCache:
    def __init__(self, capacity):
        self.capacity = capacity
        self.slots = {}
        self.hits = 0
        self.misses = 0

    def get(self, layer, expert):
        key = (layer, expert)
        if key in self.slots:
            self.hits += 1
            return self.slots[key]
        self.misses += 1
        return None

    def put(self, layer, expert, value):
        if len(self.slots) >= self.capacity:
            oldest = next(iter(self.slots))
            del self.slots[oldest]
        self.slots[(layer, expert)] = value


def main():
    import argparse
    parser = argparse.ArgumentParser(description="Run a model")
    parser.add_argument("--model", required=True)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    for i in range(10):
        print(f"step {i}: loss = {1.0 / (i + 1):.4f}")
    return 0


if __name__ == "__main__":
    main()

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct buffer {
	size_t size;
	size_t used;
	char *data;
};

static int buffer_append(struct buffer *b, const char *text, size_t n)
{
	if (b->used + n > b->size) {
		size_t size = b->size ? 2 * b->size : 64;
		while (size < b->used + n)
			size *= 2;
		char *data = realloc(b->data, size);
		if (data == NULL)
			return -1;
		b->data = data;
		b->size = size;
	}
	memcpy(b->data + b->used, text, n);
	b->used += n;
	return 0;
}

int main(int argc, char **argv)
{
	struct buffer b = {0};
	for (int i = 1; i < argc; i++) {
		if (buffer_append(&b, argv[i], strlen(argv[i])) != 0) {
			fprintf(stderr, "out of memory\n");
			return 1;
		}
	}
	printf("%zu bytes\n", b.used);
	free(b.data);
	return 0;
}

template <typename T>
std::vector<T> top_k(const std::vector<T>& values, size_t k) {
  std::vector<size_t> index(values.size());
  std::iota(index.begin(), index.end(), 0);
  std::partial_sort(index.begin(), index.begin() + k, index.end(),
                    [&](size_t a, size_t b) { return values[a] > values[b]; });
  std::vector<T> result;
  for (size_t i = 0; i < k; ++i) result.push_back(values[index[i]]);
  return result;
}

function sum(values) {
  let total = 0;
  for (const value of values) {
    total += value;
  }
  return total;
}

const result = await fetch("https://example.com/api/v1/models?limit=10");
if (!result.ok) throw new Error(`request failed: ${result.status}`);
const data = await result.json();
console.log(data.models.map((m) => m.name).join(", "));

SELECT name, count(*) AS total FROM users WHERE created_at > '2024-01-01' GROUP BY name ORDER BY total DESC;

$ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
$ cmake --build build -j 8
$ ./build/bin/run --model models/tiny.gguf --prompt "Hello world" --n-predict 32
)corpus";

constexpr std::string_view kData = R"corpus(
{"name": "tiny", "layers": 6, "hidden": 256, "experts": 16, "top_k": 4, "vocab": 2048, "tied": true}
{"id": 12, "user": "alice", "email": "alice@example.com", "active": true, "score": 98.5, "tags": ["admin", "dev"]}
{"id": 13, "user": "bob", "email": "bob@example.org", "active": false, "score": 71.25, "tags": []}
[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
date,city,temperature,rain
2024-03-01,London,11.5,2.0
2024-03-02,Paris,13.0,0.0
2024-03-03,Berlin,9.5,4.5

# Results

| model | tokens/s | memory |
| --- | --- | --- |
| small | 42.0 | 1.2 GB |
| large | 12.5 | 4.8 GB |

- first item
- second item
- third item

The meeting is at 10:30 on 2025-06-14, room 204. Call +1 555 0100 or write to team@example.com.
Version 3.21.1 was released on 12/05/2024; it fixed 17 bugs and added 3 features.
)corpus";

constexpr std::string_view kWorld = R"corpus(
Le matin, nous prenons un café et nous lisons le journal. La ville est calme et le ciel est bleu.
Bonjour, comment allez-vous ? Je vais bien, merci. Où est la gare, s'il vous plaît ?
Der Zug kommt um acht Uhr an. Wir gehen zusammen in die Stadt und essen in einem kleinen Restaurant.
Guten Morgen! Wie geht es dir? Mir geht es gut, danke. Das Wetter ist heute schön.
El tiempo es bueno hoy y vamos a la playa con nuestros amigos. ¿Dónde está la biblioteca?
Buenos días. Me llamo Ana y vivo en Madrid. Trabajo en una oficina cerca del centro.
O sol nasce cedo no verão, e as pessoas caminham na praia antes do trabalho. Obrigado pela ajuda!
Привет! Как дела? Сегодня хорошая погода, и мы идём гулять в парк.
Москва большой город. Я читаю книгу и пью чай.
こんにちは。今日はいい天気ですね。私は東京に住んでいます。日本語を勉強しています。
ありがとうございます。これはペンです。あれは本です。
你好，今天天气很好。我们去公园散步吧。我喜欢学习中文。
谢谢你的帮助。这是我的朋友。
안녕하세요. 오늘 날씨가 좋네요. 저는 서울에 살고 있습니다.
مرحبا، كيف حالك؟ أنا بخير، شكرا. الطقس جميل اليوم.
Café, naïve, résumé, façade, jalapeño, Zürich, Ångström, São Paulo, smörgåsbord.
)corpus";

// Words whose combining marks (\p{M}: Devanagari, Bengali and Tamil vowel signs and viramas, Thai vowel and
// tone marks, and decomposed Latin and Vietnamese accents) the Qwen3.5 pre-tokenizer keeps inside the word.
// No danda or other non-ASCII punctuation: the trainer's split takes every non-ASCII character for a letter.
constexpr std::string_view kMarks =
    "\n"
    "नमस्ते दुनिया, आप कैसे हैं? मैं ठीक हूँ, धन्यवाद\n"
    "आज मौसम बहुत अच्छा है और हम पार्क में घूमने जा रहे हैं\n"
    "मुझे हिन्दी पढ़ना और लिखना पसंद है, आप भी हिन्दी सीखिए\n"
    "सवाल छोटा हो तो जवाब भी छोटा और साफ़ होना चाहिए\n"
    "สวัสดีครับ วันนี้อากาศดีมาก เราจะไปเดินเล่นที่สวนสาธารณะ\n"
    "ขอบคุณมากครับ ภาษาไทยไม่ยากเกินไป ฉันชอบอ่านหนังสือ\n"
    "আমি বাংলায় কথা বলি, তুমি কেমন আছো? আজ আকাশ খুব সুন্দর\n"
    "வணக்கம், நீங்கள் எப்படி இருக்கிறீர்கள்? நான் நன்றாக இருக்கிறேன்\n"
    "cafe\u0301, re\u0301sume\u0301, nai\u0308ve, fac\u0327ade, jalapen\u0303o, Zu\u0308rich, "
    "A\u030angstro\u0308m, Sa\u0303o Paulo, cre\u0300me bru\u0302le\u0301e\n"
    "Le cafe\u0301 est pre\u0302t, et le the\u0301 aussi. Ou\u0300 est la gare, s'il vous plai\u0302t ?\n"
    "Xin cha\u0300o, ba\u0323n co\u0301 kho\u0309e kho\u0302ng? Tie\u0302\u0301ng Vie\u0323\u0302t "
    "ra\u0302\u0301t hay\n";

}  // namespace

std::vector<std::string_view> builtin_corpus() { return {kProse, kChat, kCode, kData, kWorld}; }

std::string_view combining_marks_corpus() { return kMarks; }

}  // namespace df::synth
